"""The synthetic population generator and scenario files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from socialenv import Scenario, make_scenario
from socialenv.envs.rec import RecEnv
from socialenv.scenarios.builtin import ABORTION_NEWS, ROLES


def test_generator_is_deterministic_and_seed_dependent() -> None:
    a = make_scenario("abortion", 500, seed=1)
    b = make_scenario("abortion", 500, seed=1)
    c = make_scenario("abortion", 500, seed=2)
    np.testing.assert_array_equal(a.latent, b.latent)
    np.testing.assert_array_equal(a.follow_dst, b.follow_dst)
    assert not np.array_equal(a.opinion, c.opinion)


def test_population_does_not_depend_on_the_blas_thread_count() -> None:
    """Above ~100k users a threaded BLAS product rounds differently; the same seed must give
    the same population on a 1-thread and a many-thread machine."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        one = make_scenario("abortion", 200_000, seed=7)
    with threadpool_limits(limits=4, user_api="blas"):
        many = make_scenario("abortion", 200_000, seed=7)
    np.testing.assert_array_equal(one.latent, many.latent)


def test_profiles_have_the_four_attributes() -> None:
    s = make_scenario("abortion", 300, seed=0)
    described = s.profiles.describe(7)
    assert set(described) == {
        "likely_identity",
        "interested_areas",
        "posting_style",
        "interaction_behaviour",
    }
    assert all(described.values())
    assert set(np.unique(s.profiles.interaction_role.codes)) <= set(range(len(ROLES)))
    assert s.profiles.interests.any(axis=1).all()


def test_follow_graph_is_homophilous_and_heavy_tailed() -> None:
    s = make_scenario("abortion", 5000, seed=0)
    sign = np.sign(np.where(np.abs(s.opinion) < 0.2, 0, s.opinion))
    same = np.mean(sign[s.follow_src] == sign[s.follow_dst])
    # a random graph would put ~ sum of squared camp shares (< 0.5) of edges within camps
    shares = np.bincount((sign + 1).astype(int), minlength=3) / len(sign)
    assert same > (shares**2).sum() + 0.2
    followers = np.bincount(s.follow_dst, minlength=s.num_users)
    assert followers.max() > 20 * np.median(followers)
    assert not np.any(s.follow_src == s.follow_dst)


def test_follow_graph_does_not_depend_on_its_block_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """The graph is drawn and keyed block by block of edges; the blocks must not change the
    draws' order, the edges or the generator's state after them."""
    from socialenv.scenarios import builtin as scenarios

    opinion = np.clip(np.random.default_rng(3).standard_normal(4000) * 0.6, -1, 1).astype(
        np.float32
    )
    config = scenarios.PopulationConfig(mean_following=40)
    graphs, after = [], []
    for block in (1 << 20, 4096, 1000):
        monkeypatch.setattr(scenarios, "_EDGE_BLOCK", block)
        rng = np.random.default_rng(11)
        graphs.append(scenarios._follow_graph(opinion, config, rng))
        after.append(rng.random())
    src, dst = graphs[0]
    assert len(src) > 4 * 4096 and after[0] == after[1] == after[2]
    for other_src, other_dst in graphs[1:]:
        np.testing.assert_array_equal(src, other_src)
        np.testing.assert_array_equal(dst, other_dst)
    keys = src * len(opinion) + dst
    assert np.all(keys[1:] > keys[:-1]) and not np.any(
        src == dst
    )  # sorted, distinct, no self-loops


@pytest.mark.parametrize("advice", [True, False])
def test_generation_leaves_numpy_huge_page_advice_as_it_was(advice: bool) -> None:
    multiarray = (getattr(np, "_core", None) or np.core).multiarray
    previous = multiarray._set_madvise_hugepage(advice)
    try:
        make_scenario("abortion", 300, seed=0)
        make_scenario("misinformation", 300, seed=0)
        assert multiarray._get_madvise_hugepage() == advice
        RecEnv(num_users=300, rounds=2).reset(seed=0)  # the whole reset runs in small pages
        assert multiarray._get_madvise_hugepage() == advice
        with pytest.raises(ValueError, match="num_users"):
            make_scenario("abortion", 1, seed=0)
        assert multiarray._get_madvise_hugepage() == advice
    finally:
        multiarray._set_madvise_hugepage(previous)


def test_builtin_scenarios() -> None:
    abortion = make_scenario("abortion", 400, seed=0)
    assert [e.round for e in abortion.news] == [0, 4, 7] == [e.round for e in ABORTION_NEWS]
    assert not abortion.misinformed.any()
    mis = make_scenario("misinformation", 1000, seed=0)
    assert mis.misinformed.mean() == pytest.approx(0.2)
    assert mis.misinformation_message and "#gun" in mis.misinformation_message
    assert mis.history_misinfo.any()
    np.testing.assert_array_equal(mis.history_misinfo, mis.misinformed[mis.history_author])


def test_text_is_generated_on_request() -> None:
    s = make_scenario("misinformation", 100, seed=0, with_text=True)
    assert s.history_text is not None and len(s.history_text) == len(s.history_author)
    flagged = [t for t, m in zip(s.history_text, s.history_misinfo, strict=True) if m]
    assert all("#wakeupamerica" in t for t in flagged)


def test_save_load_roundtrip(tmp_path: Path) -> None:
    s = make_scenario("misinformation", 200, seed=4, with_text=True)
    loaded = Scenario.load(s.save(tmp_path / "scenario"))
    np.testing.assert_array_equal(loaded.latent, s.latent)
    assert loaded.history_text == s.history_text
    assert loaded.news == s.news
    assert loaded.profiles.describe(3) == s.profiles.describe(3)


def test_from_arrays_and_validation() -> None:
    s = Scenario.from_arrays(
        opinion=[0.5, -0.5, 0.0, 0.9], follow_src=[0, 1, 2], follow_dst=[1, 2, 3]
    )
    assert s.num_users == 4 and s.latent.shape == (4, 32)
    with pytest.raises(ValueError, match="follow_src"):
        Scenario.from_arrays(opinion=[0.5, -0.5], follow_src=[0, 5], follow_dst=[1, 0])
    with pytest.raises(ValueError, match="opinion"):
        Scenario.from_arrays(opinion=[2.0, -0.5], follow_src=[0], follow_dst=[1])
    with pytest.raises(ValueError, match="themself"):
        Scenario.from_arrays(opinion=[0.1, -0.5], follow_src=[0], follow_dst=[0])
    with pytest.raises(ValueError, match="scenario='mars'"):
        make_scenario("mars", 10, 0)
    with pytest.raises(FileNotFoundError):
        Scenario.load("/nonexistent/scenario.npz")


def test_scenario_arrays_are_checked_before_reading(tmp_path: Path) -> None:
    """Issue 21: a header declaring a huge array, an unknown member or a compressed bomb is
    refused before any array is read."""
    import io
    import zipfile

    path = make_scenario("abortion", 50, seed=0).save(tmp_path / "s")

    def rewrite(name: str, raw: bytes | None, extra: str | None = None) -> Path:
        out = tmp_path / f"{name}-{extra}.npz"
        with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
            for member in src.namelist():
                dst.writestr(
                    member, raw if member == f"{name}.npy" and raw is not None else src.read(member)
                )
            if extra is not None:
                dst.writestr(f"{extra}.npy", src.read("opinion.npy"))
        out.with_suffix(".json").write_text(path.with_suffix(".json").read_text())
        return out

    header = io.BytesIO()
    np.lib.format.write_array_header_2_0(
        header, {"descr": "<f8", "fortran_order": False, "shape": (10**7, 10**6)}
    )
    with pytest.raises(
        ValueError, match=r"array 'latent': its header declares shape \(10000000, 1000000\)"
    ):
        Scenario.load(rewrite("latent", header.getvalue()))
    with pytest.raises(ValueError, match=r"unknown member\(s\) \['evil.npy'\]"):
        Scenario.load(rewrite("latent", None, "evil"))
    bomb = io.BytesIO()
    np.save(bomb, np.zeros((50, 400_000), np.float32))
    with pytest.raises(ValueError, match="refused as a zip bomb"):
        Scenario.load(rewrite("latent", bomb.getvalue()))
    rows = io.BytesIO()
    np.save(rows, np.zeros(7, np.float32))
    with pytest.raises(
        ValueError, match=r"array 'activity': 7 rows is not allowed: 50, as 'latent'"
    ):
        Scenario.load(rewrite("activity", rows.getvalue()))
