from django.apps import AppConfig


class LedgerAppConfig(AppConfig):
    name = "ledger_app"
    verbose_name = "Refund ledger"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from django.contrib.auth import get_user_model
        from django.db.models.signals import pre_delete

        from ledger_app.audit_trail import refuse_to_delete_audited_user

        # Connected to the user model only, so every other model keeps fast deletes.
        pre_delete.connect(
            refuse_to_delete_audited_user,
            sender=get_user_model(),
            dispatch_uid="ledger_app.refuse_to_delete_audited_user",
        )
