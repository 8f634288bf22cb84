"""Every figure of llmqueue, in one place: pending over time, latency CDFs,
networks, the stability region and sweeps.  Each function takes an optional
``ax=`` and returns the figure.  Importing this package imports matplotlib;
nothing else in llmqueue does."""
