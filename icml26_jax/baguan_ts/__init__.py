"""Baguan-TS (ICML 2026): sequence-native in-context forecasting with covariates.

``model`` the 3D transformer (patch encoder, variable / patch / context attention, bar head);
``losses`` the bar distribution (NLL with half-normal tails, discrete CRPS, decoding);
``retrieval`` Y-space RBfcst and the naive contexts; ``normalize`` the two-stage context
normalisation; ``predict`` the forecaster (masked repeats, anti-symmetric pairing, 2D mode);
``prior`` the synthetic pretraining prior; ``batches`` training batches; ``data_real`` the
real series and the held-out synthetic set; ``baselines`` the classical and tabular anchors;
``peers`` adapters for hub models; ``metrics`` MASE, WQL, SQL, OSI, win rate, skill;
``train`` pretraining and the experiment; ``evaluate`` the evaluation and claims.
"""

from icml26_jax.baguan_ts import (baselines, batches, data_real, losses, metrics, model,
                                  normalize, peers, predict, prior, retrieval)

__all__ = ["baselines", "batches", "data_real", "losses", "metrics", "model", "normalize",
           "peers", "predict", "prior", "retrieval"]
