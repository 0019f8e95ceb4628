"""The runtime layer: the only place that knows Celery (app, tasks, worker bootstrap, embedded mode)."""
