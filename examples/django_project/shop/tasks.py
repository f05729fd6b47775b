"""The firesafe application of the shop, and its one job.

The app opens its store on first use, so importing this module connects to nothing.
"""

from django.conf import settings
from django.db import close_old_connections

from examples.django_project.shop.models import Order
from firesafe import App

app = App(settings.FIRESAFE_STORE)


@app.job(queue="shipping")
def ship_order(ctx, order_id: int) -> str:
    try:
        # Runs in a worker thread, with a Django connection of that thread's own.
        shipped = Order.objects.filter(id=order_id, status="paid").update(status="shipped")
        return f"shipped order {order_id}" if shipped else f"order {order_id} was already shipped"
    finally:
        close_old_connections()  # as Django does after a request: no connection left behind per thread
