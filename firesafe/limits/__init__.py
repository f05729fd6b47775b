"""Provider-aware limits: shared rate limits, concurrency limits, Retry-After pauses and outage breakers.

Declare with :meth:`firesafe.App.limiter`, use with ``@app.job(limiter=...)`` or ``with ctx.limit(...)``;
see docs/limits.md. Pure arithmetic in :mod:`firesafe.limits.bucket`, the store's side in
:mod:`firesafe.limits.store`, the worker's side in :mod:`firesafe.limits.gate`.
"""
