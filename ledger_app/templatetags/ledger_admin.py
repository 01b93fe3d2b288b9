"""Template tags of the back office's admin pages (the logic lives in ledger_app.admin)."""

from django import template

from ledger_app.admin.queues import queues_of

register = template.Library()


@register.simple_tag(takes_context=True)
def refund_queues(context):
    """The refund queues the signed-in person may see, with their counts."""
    return queues_of(context["request"])
