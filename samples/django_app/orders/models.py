from django.db import models


class Order(models.Model):  # type: ignore[misc]
    item = models.CharField(max_length=100)
    quantity = models.PositiveIntegerField()
    confirmed = models.BooleanField(default=False)
    shipped_on_attempt = models.PositiveIntegerField(null=True)
    audited = models.BooleanField(default=False)
    reminded = models.BooleanField(default=False)
