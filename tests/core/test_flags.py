"""core.flags.as_tuple: the forms a list-valued config flag arrives in."""

from icml26_jax.core.flags import as_tuple


def test_as_tuple_splits_every_form_of_a_list_flag():
    assert as_tuple("a,b") == ("a", "b")
    assert as_tuple(("a,b",)) == ("a", "b")  # what config_flags gives a tuple field
    assert as_tuple(("a", "b, c")) == ("a", "b", "c")
    assert as_tuple(("16,32",), int) == (16, 32)
    assert as_tuple((0.5, 1), float) == (0.5, 1.0)
    assert as_tuple("") == () and as_tuple(()) == ()
