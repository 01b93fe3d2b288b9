from django.apps import AppConfig


class SimulatedProviderConfig(AppConfig):
    name = "simulated_provider"
    verbose_name = "Simulated payment provider"
    default_auto_field = "django.db.models.BigAutoField"
