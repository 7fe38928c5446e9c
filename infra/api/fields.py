"""Strict JSON field types: the API takes 5 as an integer and "5" as a string, never one for the other."""

from rest_framework import serializers

from infra.times import BadTime, parse_time


class StrictCharField(serializers.CharField):
    """A JSON string whose length limit counts what was sent, as the schema says (not the trimmed text)."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        if self.max_length is not None and len(data) > self.max_length:
            self.fail("max_length", max_length=self.max_length)
        return super().to_internal_value(data)


class StrictSlugField(serializers.SlugField):
    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictChoiceField(serializers.ChoiceField):
    """One of the choices as a JSON string. The refusal names the choices and never echoes the input:
    a lone surrogate in it could not be encoded in the answer."""

    default_error_messages = {"invalid_choice": "Give one of: {choices}."}

    def to_internal_value(self, data):
        if not isinstance(data, str) or data not in self.choice_strings_to_values:
            self.fail("invalid_choice", choices=", ".join(self.choice_strings_to_values))
        return self.choice_strings_to_values[data]


class StrictIntegerField(serializers.IntegerField):
    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class StrictDecimalStringField(serializers.DecimalField):
    """Money and other exact decimals as a JSON string ("2.50"): a JSON number is a float on the way
    in and may not hold the cents exactly, so it is refused."""

    default_error_messages = {"not_a_string": 'Give the amount as a JSON string, e.g. "2.50".'}

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("not_a_string")
        return super().to_internal_value(data)


class AwareDateTimeField(serializers.DateTimeField):
    """An ISO 8601 time that says its timezone (a node's naive clock reading is ambiguous), in UTC and
    within the years the portal computes with (infra.times)."""

    def to_internal_value(self, value):
        try:
            return parse_time(value)
        except BadTime as problem:
            raise serializers.ValidationError(problem.sentence()) from None
