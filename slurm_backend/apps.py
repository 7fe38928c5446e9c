from django.apps import AppConfig


class SlurmBackendConfig(AppConfig):
    name = "slurm_backend"
    verbose_name = "Slurm backend"

    def ready(self) -> None:
        from scheduler_app.rules.invariants import register_backend_check
        from slurm_backend.invariants import all_differences

        register_backend_check(all_differences)
