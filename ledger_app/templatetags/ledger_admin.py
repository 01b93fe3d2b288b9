"""Template tags of the back office's admin pages (the logic lives in ledger_app.admin)."""

from django import template

from ledger_app.admin.chart import stacked_bars
from ledger_app.admin.dashboard import CHART_DAYS, COUNTED, REASONS, refund_activity_of
from ledger_app.admin.queues import queues_of

register = template.Library()


@register.simple_tag(takes_context=True)
def refund_queues(context):
    """The refund queues the signed-in person may see, with their counts."""
    return queues_of(context["request"])


@register.inclusion_tag("admin/ledger_app/dashboard/refund_activity.html", takes_context=True)
def refund_activity(context):
    """Today's refunds per currency and a chart of the last days, for people who may view
    refunds; nothing for anyone else."""
    activity = refund_activity_of(context["request"])
    return {
        "activity": activity,
        "chart": stacked_bars(activity.days) if activity and activity.busiest_day else None,
        "chart_days": CHART_DAYS,
        "counted_statuses": in_words([status.label.lower() for status in COUNTED]),
        "reasons": [{"value": value or "none", "label": label} for value, label in REASONS],
    }


def in_words(items: list[str]) -> str:
    """["a", "b", "c"] as "a, b and c"."""
    return " and ".join([", ".join(items[:-1]), items[-1]] if len(items) > 1 else items)
