"""The serving process: the runtime that brings the parts up and down, its metrics."""
