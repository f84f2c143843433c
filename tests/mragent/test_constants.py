"""No jitted step of ``train.run`` embeds a large constant: the tag k-means of graph building
and the personalised-PageRank rows of the evaluation get the smoke config's data (built by
``train.load_data`` / ``build_graphs`` / ``prepare``) as jit arguments. An array closed over
would be baked into the program, which then grows with the conversation and recompiles for
every new graph. The steps are lowered with the arguments ``train`` passes them."""

from icml26_jax.core.testing import MAX_CONSTANT_BYTES, largest_constant
from icml26_jax.mragent import baselines, configs, graph, train

LIMIT = MAX_CONSTANT_BYTES


def test_steps_embed_no_large_constant(tmp_path, monkeypatch):
    c = configs.get_config("smoke")
    assert c.ppr  # the PageRank rows are part of the smoke run
    found = {}

    def recording(name, fn):
        def wrapped(*args, **kwargs):
            got = largest_constant(fn, *args, **kwargs)
            found[name] = max(found.get(name, (0, ())), got)
            return fn(*args, **kwargs)
        return wrapped

    monkeypatch.setattr(graph, "_kmeans", recording("graph._kmeans", graph._kmeans))
    monkeypatch.setattr(baselines, "_ppr", recording("baselines._ppr", baselines._ppr))
    convs, _, test = train.load_data(c, str(tmp_path))
    i = test[0]  # one test conversation keeps the test fast
    emb, graphs, _ = train.build_graphs(c, [convs[i]])
    train.prepare(c, [convs[i]], graphs, [0], emb, None)
    assert set(found) == {"graph._kmeans", "baselines._ppr"}, found
    for name, (nbytes, shape) in found.items():
        assert nbytes <= LIMIT, f"{name} embeds a {nbytes}-byte constant of shape {shape}"
