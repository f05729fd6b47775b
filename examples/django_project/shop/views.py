import json

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_POST

from examples.django_project.shop.models import Order
from examples.django_project.shop.tasks import ship_order
from firesafe.integrations.django import conn_of

STOCK = 10  # how many of any item the shop holds


class OutOfStock(Exception):
    pass


@require_POST
def create_order(request: HttpRequest) -> JsonResponse:
    body = json.loads(request.body)
    try:
        with transaction.atomic():
            order = Order.objects.create(item=body["item"], quantity=body["quantity"])
            job = ship_order.enqueue(order.id, key=f"ship-order:{order.id}", conn=conn_of())
            if order.quantity > STOCK:  # found out after both writes: the rollback undoes both
                raise OutOfStock(f"only {STOCK} {order.item} in stock")
    except OutOfStock as exc:
        return JsonResponse({"error": str(exc)}, status=409)
    return JsonResponse({"order": order.id, "job": job.key}, status=201)
