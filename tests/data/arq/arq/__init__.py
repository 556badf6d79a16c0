from .connections import ArqRedis, create_pool
from .cron import cron
from .version import VERSION
from .worker import Retry, Worker, check_health, func, run_worker

__version__ = VERSION

__all__ = (
    'ArqRedis',
    'create_pool',
    'cron',
    'VERSION',
    'Retry',
    'Worker',
    'check_health',
    'func',
    'run_worker',
)
