"""The bases of mixins: to the type checker, the class each mixin is mixed into (so that a
mixin's `self.model`, `self.field_name` and `super()` calls are checked against it); at
run time `object`, so that the mixin adds nothing to the classes that use it."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin
    from django.contrib.admin.views.main import ChangeList
    from rest_framework.fields import Field

    from ledger_app.admin.base import ReadOnlyAdmin

    ModelAdminMixin = ModelAdmin[Any]
    DrfFieldMixin = Field[Any, Any, Any, Any]
    ChangeListMixin = ChangeList
    ReadOnlyAdminMixin = ReadOnlyAdmin
else:
    ModelAdminMixin = DrfFieldMixin = ChangeListMixin = ReadOnlyAdminMixin = object
