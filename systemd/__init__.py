"""Service templates (systemd unit, launchd plist), shipped as package data memoryd.systemd."""
