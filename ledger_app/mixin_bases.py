"""The bases of mixins: to the type checker, the class each mixin is mixed into (so that a
mixin's `self.model`, `self.field_name` and `super()` calls are checked against it); at
run time `object`, so that the mixin adds nothing to the classes that use it. Only
Django's and DRF's classes: the admin's own ReadOnlyAdmin has its mixin base beside it
(admin/base.py's ReadOnlyAdminMixin), so that this module imports nothing of ledger_app."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django import forms
    from django.contrib.admin import ModelAdmin
    from django.contrib.admin.views.main import ChangeList
    from rest_framework.fields import Field
    from rest_framework.views import APIView

    ModelAdminMixin = ModelAdmin[Any]
    DrfFieldMixin = Field[Any, Any, Any, Any]
    ChangeListMixin = ChangeList
    FormMixin = forms.Form
    FormFieldMixin = forms.Field
    ApiViewMixin = APIView
else:
    ModelAdminMixin = DrfFieldMixin = ChangeListMixin = object
    FormMixin = FormFieldMixin = ApiViewMixin = object
