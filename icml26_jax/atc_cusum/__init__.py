"""ATC: Anytime Tracking CUSUM for online mean tracking under multiple change points.

``atc_predict`` runs ATC over one series as a ``lax.scan`` (vmap it over runs);
``atc_init``/``atc_update`` is the streaming form; ``baselines`` holds the sliding window,
discounted mean, fixed-confidence and Page CUSUMs, the oracle and the peer wrappers (river's
ADWIN, changepoint-online's FOCuS). Enable ``jax_enable_x64`` for long series.
"""

from icml26_jax.atc_cusum.atc import (ATCOutput, ATCParams, ATCState, atc_init, atc_numpy,
                                      atc_predict, atc_reference, atc_update, geom_offsets,
                                      tracking_cusum)
from icml26_jax.atc_cusum.baselines import (adwin_predict, discounted_mean, fixed_conf_cusum,
                                            focus_predict, oracle_segment_mean, page_cusum,
                                            sliding_window)
from icml26_jax.atc_cusum.envs import (load_csv, load_nile, load_realint, random_jumps,
                                       sigma_hat, single_change, square_wave, staircase)
from icml26_jax.atc_cusum.metrics import (lower_bound_curve, ls_segmentation, one_step_mse,
                                          prefix_regret, regret)

__all__ = [
    "ATCOutput", "ATCParams", "ATCState", "adwin_predict", "atc_init", "atc_numpy",
    "atc_predict", "atc_reference", "atc_update", "discounted_mean", "fixed_conf_cusum",
    "focus_predict", "geom_offsets", "load_csv", "load_nile", "load_realint",
    "lower_bound_curve", "ls_segmentation", "one_step_mse", "oracle_segment_mean",
    "page_cusum", "prefix_regret", "random_jumps", "regret", "sigma_hat", "single_change",
    "sliding_window", "square_wave", "staircase", "tracking_cusum",
]
