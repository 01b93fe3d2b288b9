from django.apps import AppConfig


class LedgerAppConfig(AppConfig):
    name = "ledger_app"
    verbose_name = "Refund ledger"
    default_auto_field = "django.db.models.BigAutoField"
