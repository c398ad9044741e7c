"""Page identity: chained hashes of page-aligned tokens, namespaced by model and tenant."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from penelope_engine.cache.pages import PageHasher

PS = 4
tokens = st.lists(st.integers(0, 151_000), min_size=PS, max_size=12 * PS)


@settings(max_examples=50, deadline=None)
@given(toks=tokens, data=st.data())
def test_a_change_at_token_t_changes_only_pages_from_t_on(toks: list[int], data) -> None:
    hasher = PageHasher(PS, "m")
    t = data.draw(st.integers(0, len(toks) - 1), label="t")
    changed = list(toks)
    changed[t] = toks[t] + 1
    a, b = hasher.hashes(toks), hasher.hashes(changed)
    first = t // PS
    assert len(a) == len(b) == len(toks) // PS
    np.testing.assert_array_equal(a[:first], b[:first])
    assert (a[first:] != b[first:]).all()


@settings(max_examples=50, deadline=None)
@given(toks=tokens, tail=st.lists(st.integers(0, 151_000), max_size=3 * PS))
def test_equal_prefixes_give_equal_hashes(toks: list[int], tail: list[int]) -> None:
    hasher = PageHasher(PS, "m")
    a, b = hasher.hashes(toks), hasher.hashes(toks + tail)
    np.testing.assert_array_equal(a, b[: len(a)])


def test_hash_is_chained_not_per_page() -> None:
    """The same page content after different histories has different ids."""
    hasher = PageHasher(PS, "m")
    page = [7, 8, 9, 10]
    a = hasher.hashes([1, 2, 3, 4] + page)
    b = hasher.hashes([5, 6, 7, 8] + page)
    assert a[1] != b[1]
    assert len(set(hasher.hashes(page * 6).tolist())) == 6


def test_a_partial_page_has_no_hash() -> None:
    hasher = PageHasher(PS, "m")
    assert len(hasher.hashes([1, 2, 3])) == 0
    full = hasher.hashes(list(range(8)))
    np.testing.assert_array_equal(hasher.hashes(list(range(11))), full)
    assert hasher.num_pages(11) == 2


def test_tenants_and_models_never_share_a_page_id() -> None:
    toks = list(range(100, 140))
    m = PageHasher(PS, "model-a")
    a, b = m.hashes(toks, "tenant-a"), m.hashes(toks, "tenant-b")
    other_model = PageHasher(PS, "model-b").hashes(toks, "tenant-a")
    assert not set(a.tolist()) & set(b.tolist())
    assert not set(a.tolist()) & set(other_model.tolist())
    np.testing.assert_array_equal(a, m.hashes(toks, "tenant-a"))


def test_hashes_are_stable_across_hasher_instances() -> None:
    """Replicas and the router must agree on page ids without talking."""
    toks = np.arange(64) * 31 % 1000
    np.testing.assert_array_equal(
        PageHasher(16, "m").hashes(toks), PageHasher(16, "m").hashes(toks)
    )
    assert PageHasher(16, "m").hashes(toks).dtype == np.uint64


def test_page_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="page_size"):
        PageHasher(0, "m")


def test_first_pages_name_a_prompt_as_the_engine_does_for_each_tenant() -> None:
    from penelope_engine.cache.pages import FirstPages, PageNaming

    public = tuple(range(1, 9))  # two pages an operator declared public
    naming = PageNaming(4, "model-x", (public,))
    first = FirstPages(naming)
    prompt = public + tuple(range(100, 130))
    hasher = PageHasher(4, "model-x")
    for tenant in ("default", "acme"):
        want = tuple(int(h) for h in hasher.hashes(prompt, tenant, public_pages=2)[:5])
        assert first(prompt, tenant, 5) == want
    a, b = first(prompt, "default", 5), first(prompt, "acme", 5)
    assert a[:2] == b[:2] and not set(a[2:]) & set(b[2:])  # public pages shared, the rest not
    assert first(prompt[:10], "default", 5) == a[:2]  # only full pages are named
    assert FirstPages(PageNaming(4, "model-y"))(prompt, "default", 5)[0] != a[0]
