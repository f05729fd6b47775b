"""The app the RabbitMQ consumer tests run in a subprocess."""

from __future__ import annotations

from firesafe import App


def build(store_url: str) -> App:
    app = App(store_url)

    @app.on_event("orders", "order.paid")
    def on_paid(ctx, event) -> dict:
        return event.data

    return app
