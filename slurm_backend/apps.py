from django.apps import AppConfig


class SlurmBackendConfig(AppConfig):
    name = "slurm_backend"
    verbose_name = "Slurm backend"
