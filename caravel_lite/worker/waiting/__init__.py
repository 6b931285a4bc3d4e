"""The waiter's strategies, one module each (:mod:`caravel_lite.worker.waiter` chooses)."""
