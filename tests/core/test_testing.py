"""Tests of icml26_jax.core.testing, including a real 2-process x 2-device JAX job."""

import socket
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26_jax.core import testing


def test_tree_allclose_passes_on_equal_trees():
    a = {"w": jnp.ones((2, 3)), "b": [np.float32(1.0), 2]}
    testing.tree_allclose(a, {"w": np.ones((2, 3), np.float32), "b": [1.0, 2]})
    testing.tree_allclose(a, {"w": np.ones((2, 3)) + 1e-8, "b": [1.0, 2]})


@pytest.mark.parametrize("b, match", [
    ({"w": np.ones((2, 3)), "b": [1.0, 3]}, r"leaf \['b'\]\[1\]"),
    ({"w": np.ones((2, 3)) * 1.001, "b": [1.0, 2]}, r"leaf \['w'\]"),
    ({"w": np.ones((3, 2)), "b": [1.0, 2]}, r"\['w'\]: shapes differ, \(2, 3\) vs \(3, 2\)"),
    ({"w": np.ones((2, 3)), "b": [1.0, 2, 3]}, "tree structures differ"),
    ({"w": np.ones((2, 3)), "c": [1.0, 2]}, "tree structures differ"),
])
def test_tree_allclose_catches_mismatches(b, match):
    a = {"w": np.ones((2, 3)), "b": [1.0, 2]}
    with pytest.raises(AssertionError, match=match):
        testing.tree_allclose(a, b, err_msg="ctx")
    with pytest.raises(AssertionError, match="ctx"):
        testing.tree_allclose(a, b, err_msg="ctx")


def test_tree_allclose_tolerance():
    testing.tree_allclose(np.array([1.0]), np.array([1.01]), rtol=0.02)
    with pytest.raises(AssertionError):
        testing.tree_allclose(np.array([1.0]), np.array([1.01]), rtol=0.005)


def test_tree_allclose_compares_prng_keys():
    testing.tree_allclose(jax.random.key(1), jax.random.key(1))
    with pytest.raises(AssertionError):
        testing.tree_allclose(jax.random.key(1), jax.random.key(2))


def test_free_port_is_bindable():
    port = testing.free_port()
    assert 1024 <= port < 65536
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_compile_counter():
    jf = jax.jit(lambda v: jnp.sin(v) * 3.0 + 1.0)
    # Inputs are made outside the counted blocks: creating device arrays compiles too.
    x7, x5 = np.arange(7.0, dtype=np.float32), np.arange(5.0, dtype=np.float32)
    with testing.CompileCounter() as cc:
        jf(x7).block_until_ready()
    assert cc.count == 1
    with testing.CompileCounter() as cc:
        for _ in range(3):
            jf(x7).block_until_ready()  # cached executable
    assert cc.count == 0
    with testing.CompileCounter() as cc:
        jf(x5).block_until_ready()  # new shape: recompiles once
        jf(x5).block_until_ready()
        jf(x7 + 1.0).block_until_ready()
    assert cc.count == 1
    jax.jit(lambda v: v - 4.0)(x7).block_until_ready()
    assert cc.count == 1  # unregistered on exit


def test_run_processes_formats_and_reports_failure():
    code = ("import sys; p, n = int(sys.argv[1]), int(sys.argv[2]); print('id', p, 'of', n); "
            "sys.stderr.write('boom %d' % p); sys.exit(3 if p == 1 else 0)")
    with pytest.raises(AssertionError, match=r"(?s)process 1: exit code 3.*boom 1"):
        testing.run_processes([sys.executable, "-c", code, "{process_id}", "{num_processes}"],
                              num_processes=2, timeout=30)
    res = testing.run_processes([sys.executable, "-c", code, "{process_id}", "{num_processes}"],
                                num_processes=2, timeout=30, check=False)
    assert res[1].returncode == 3 and res[1].stderr == "boom 1"
    ok = code.replace("3 if p == 1 else 0", "0")
    res = testing.run_processes([sys.executable, "-c", ok, "{process_id}", "{num_processes}"],
                                num_processes=3, timeout=30)
    assert [r.stdout.strip() for r in res] == ["id 0 of 3", "id 1 of 3", "id 2 of 3"]
    assert [r.returncode for r in res] == [0, 0, 0]


def test_run_processes_kills_on_timeout():
    code = "import time; time.sleep(60)"
    with pytest.raises(AssertionError, match="timed out after 1 s"):
        testing.run_processes([sys.executable, "-c", code], num_processes=2, timeout=1)


def test_run_processes_env():
    code = "import os; print(os.environ['JAX_PLATFORMS'], os.environ['MY_VAR'])"
    (r,) = testing.run_processes([sys.executable, "-c", code], num_processes=1, timeout=30,
                                 env={"MY_VAR": "hello"})
    assert r.stdout.split() == ["cpu", "hello"]


def test_run_entry_runs_the_script_from_the_root_with_literal_braces():
    # An unknown paper: python cannot open experiments/<paper>.py, relative to the root.
    with pytest.raises(AssertionError, match=r"(?s)exit code 2.*experiments/no_such_paper.py"):
        testing.run_entry("no_such_paper", "--x={port}", variant="smoke", timeout=30)
    r = testing.run_entry("no_such_paper", "--x={port}", variant="smoke", timeout=30,
                          check=False)
    assert r.args[1:] == ["experiments/no_such_paper.py",
                          "--config=icml26_jax/no_such_paper/configs.py:smoke", "--x={port}"]
    assert r.returncode == 2


@pytest.mark.multiprocess
def test_two_processes_psum(tmp_path):
    # 2 processes x 2 CPU devices: the psum of device values 1..4 over all 4 devices is 10,
    # and an orbax checkpoint written jointly by both processes restores their own shards.
    cmd = [sys.executable, "-m", "tests.core.multiprocess_worker",
           "--coordinator_address=127.0.0.1:{port}", "--num_processes={num_processes}",
           "--process_id={process_id}", f"--ckpt_dir={tmp_path / 'ckpt'}"]
    res = testing.run_processes(cmd, num_processes=2, timeout=150)
    for i, r in enumerate(res):
        lines = [l for l in r.stdout.splitlines() if l.startswith(("PSUM", "RESTORED"))]
        assert lines[0] == f"PSUM 10.0 devices 4 process {i}", r.stdout
        # Process 0 holds devices with values 1, 2; process 1 holds 3, 4.
        assert lines[1] == f"RESTORED step 3 local_sum {3.0 if i == 0 else 7.0} same True"
        out = r.stdout
        # Every process reads the whole array, half of whose shards live on the other one.
        assert "HOST [1.0, 2.0, 3.0, 4.0]" in out, out
        # runs_mesh(n): one replica per device for n = 1 and 3, two for 5 and 6 (as on all 4
        # devices), on a device of each process at least; the padding is dropped on the host
        # and the padded outputs go back into map_runs unchanged.
        assert "RUNS n=1 shape=2 devices=2 [0.0]" in out, out
        assert "RUNS n=3 shape=4 devices=4 [0.0, 4.0, 8.0]" in out, out
        assert "RUNS n=5 shape=8 devices=4 [0.0, 4.0, 8.0, 12.0, 16.0]" in out, out
        assert "RUNS n=6 shape=8 devices=4 [0.0, 4.0, 8.0, 12.0, 16.0, 20.0]" in out, out
        # put_rows: each process generated only the rows of its own two devices.
        mine = "[0, 1, 2, 3]" if i == 0 else "[4, 5, 6, 7]"
        assert f"ROWS [0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0] mine={mine}" in out, out
        assert "BATCHED [0.0, 3.0, 6.0, 9.0, 12.0, 15.0, 18.0]" in out, out
        assert "COLUMNS local=3 mesh=2 [15.0, 18.0, 21.0, 24.0, 27.0]" in out, out
        # global_batch: each process contributes its own 4 rows of the global batch of 8.
        local = "[0.0, 1.0, 2.0, 3.0]" if i == 0 else "[4.0, 5.0, 6.0, 7.0]"
        assert (f"GLOBAL 8 local={local} [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]"
                in out), out
        # primary_first: fn ran exactly once on each process (and returned its result there).
        assert "FIRST 1" in out, out
        # distributed.agreed: process 0's flag everywhere; cached: computed once, then restored.
        assert "AGREED False CACHED [0.0, 1.0, 2.0] [0.0, 1.0, 2.0]" in out, out
    assert (tmp_path / "ckpt" / "3").is_dir()


def test_largest_constant_finds_closed_over_arrays_in_nested_regions():
    data = np.arange(512 * 1024, dtype=np.float32).reshape(512, 1024)  # 2 MiB

    def closed(x):
        def body(c, _):
            return c + jnp.asarray(data)[:, :4].sum() + x.sum(), None
        return jax.lax.scan(body, jnp.float32(0.0), None, length=3)[0]

    nbytes, shape = testing.largest_constant(closed, jnp.ones(3))
    assert (nbytes, shape) == (2 * 1024 * 1024, (512, 1024))
    # the same step taking the data as an argument embeds only scalars
    passed = jax.jit(lambda x, d: jax.lax.scan(
        lambda c, _: (c + d[:, :4].sum() + x.sum(), None), jnp.float32(0.0), None, length=3)[0])
    nbytes, shape = testing.largest_constant(passed, jnp.ones(3), jnp.asarray(data))
    assert nbytes <= 8 and shape == ()
    assert testing.largest_constant(lambda x: x + 1, jnp.ones(3, jnp.int8)) == (1, ())
    assert testing._element_bytes("bf16") == 2 and testing._element_bytes("i1") == 1
    assert testing._element_bytes("complex<f64>") == 16


def test_assert_no_large_constant_names_the_step_and_the_shape():
    data = np.zeros((300, 1024), np.float32)  # 1.2 MB > MAX_CONSTANT_BYTES
    with pytest.raises(AssertionError, match=r"^my step embeds a 1228800-byte constant of shape "
                       r"\(300, 1024\) \(over 1048576 bytes\)"):
        testing.assert_no_large_constant("my step", lambda x: x + jnp.asarray(data).sum(), 1.0)
    assert testing.assert_no_large_constant(
        "my step", lambda x, d: x + d.sum(), 1.0, jnp.asarray(data)) <= 8
