"""The Celery application: workers and beat in production read the same settings."""

import os
from pathlib import Path

from celery import Celery
from celery.beat import PersistentScheduler

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


class VarDirScheduler(PersistentScheduler):
    """Celery beat's file-backed scheduler, which makes the folder of its file first: the file lives
    under the var directory (CELERY_BEAT_SCHEDULE_FILENAME), which a production host need not have."""

    def setup_schedule(self):
        Path(self.schedule_filename).parent.mkdir(parents=True, exist_ok=True)
        super().setup_schedule()
