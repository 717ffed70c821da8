"""The reliability campaigns at a small size (tests/campaigns/; docs/reliability/campaigns.md
has the full-size figures and commands).

* corruption: random bit flips, truncations, splices, structured edits and removals of every
  kind of checkpoint file, each load in a child process under a 2 GiB address-space limit:
  never a wrong restore, a raw exception, a crash or a hang.
* sigkill: writers committing versions, checkpoints and snapshots are SIGKILLed at random
  moments: no committed version is lost, every published one restores exactly, and the next
  commit works.
"""

from tests.campaigns import corruption, sigkill


def test_corruption_campaign_small(tmp_path):
    report = corruption.run(cases=100, seed=7, workdir=str(tmp_path))
    assert report["bad"] == [], report
    outcomes = report["outcomes"]
    assert outcomes.get("corruption", 0) > 50, outcomes  # the damage was real and caught
    assert set(report["outcomes_of_damage"]) <= {"identical", "corruption", "error"}
    assert report["corruption_not_naming_the_file"] <= outcomes.get("corruption", 0) // 10


def test_sigkill_campaign_small(tmp_path):
    report = sigkill.run(rounds=2, seed=7, workdir=str(tmp_path))
    assert report["bad"] == [], report
    assert report["outcomes"] == {"ok": 2}
    assert report["restored"]["versions"] == 2
