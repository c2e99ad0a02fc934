"""The sequence trace's reading of stamps (a forward pass's calls, program by program), and its
patch: it still applies to this tree, and the patched kernel compiles for sm_90 with its
stamps."""

import math

import pandas as pd
import pytest
import torch

from mla_kernels.lab.diagnostics import sequence_trace as st


def _stamps(seed: int) -> tuple[torch.Tensor, dict]:
    """Three calls of four programs, the first a left-over one (no items): each call's
    moments at known offsets from its wait, with a known hand-over from the call before."""
    g = torch.Generator().manual_seed(seed)
    offsets = {6: 300, 7: 900, 2: 2500, 3: 3400, 4: 9000, 5: 12000}  # ns after the wait
    handover = [0, 1500, 2300]
    stamps = torch.zeros(3, 4, st.SLOTS, dtype=torch.int64)
    stamps[:, :, st.SM_SLOT] = torch.tensor([7, 3, 12, 1]) + 1  # each program's SM, plus one
    prev_end = 50_000
    for c in range(3):
        wait = prev_end + handover[c] + (0 if c else 7000)
        stamps[c, 0, 0] = wait - 8000  # the left-over program entered first, ...
        stamps[c, 0, 1] = wait - 10  # ... its wait returned with the others'
        for p in range(1, 4):
            jitter = int(torch.randint(0, 40, (1,), generator=g))
            stamps[c, p, 0] = wait - 3000 + jitter
            stamps[c, p, 1] = wait + jitter
            for slot, ns in offsets.items():
                stamps[c, p, slot] = wait + jitter + ns + 10 * p
        prev_end = int(stamps[c, 1:, 5].max())
    return stamps, dict(offsets=offsets, handover=handover)


def test_call_rows_read_each_moment_after_the_wait_and_the_hand_over(seed):
    stamps, want = _stamps(seed)
    rows = st.call_rows(stamps)
    assert [r["call"] for r in rows] == [0, 1, 2], f"seed {seed}"
    for r in rows:
        assert r["programs"] == 4 and r["programs_with_items"] == 3
        for slot, ns in want["offsets"].items():
            # Medians over the programs with items: the middle one's jitter and its 10 ns.
            assert abs(r[st.STAMPS[slot]] - (ns + 20) / 1e3) < 0.05, (slot, r, f"seed {seed}")
        assert r["first_entered_us"] < -7.9  # the left-over program, 8 µs before
    assert "hand-over_us" not in rows[0]  # nothing stamped before the first call
    for c in (1, 2):
        # The earliest wait of the call after the last end of the one before.
        assert abs(rows[c]["hand-over_us"] - want["handover"][c] / 1e3) < 0.05, (
            rows[c], f"seed {seed}")
        prev = int(stamps[c - 1, 1:, 5].max())
        assert math.isclose(rows[c]["call_interval_us"],
                            (int(stamps[c, 1:, 5].max()) - prev) / 1e3)


def test_a_call_with_no_program_stamped_is_left_out_and_breaks_the_hand_over(seed):
    stamps, _ = _stamps(seed)
    stamps[1] = 0
    rows = st.call_rows(stamps)
    assert [r["call"] for r in rows] == [0, 2]
    assert "hand-over_us" not in rows[1]


def test_stamp_rows_keep_every_program_after_the_replay_s_first_stamp(seed):
    stamps, _ = _stamps(seed)
    df = st.stamp_rows(stamps)
    assert len(df) == 3 * 4
    assert list(df.columns[:3]) == ["call", "program", "sm"]
    assert df["sm"].tolist() == [7, 3, 12, 1] * 3  # as stamped, not shifted with the times
    values = df[[st.STAMPS[k] for k in range(st.SM_SLOT)]]
    assert values.min().min() == 0  # the first stamp, and the unstamped slots
    first = stamps[..., :st.SM_SLOT]
    first = first[first != 0].min()
    assert int(values.iloc[5][st.STAMPS[5]]) == int(stamps[1, 1, 5] - first)


def _ends(seed: int, by: str) -> pd.DataFrame:
    """Stamp rows of 12 calls x 8 programs whose ends follow ``by`` ("sm" or "program") by
    0-7 µs, plus up to 0.1 µs of noise; the SM under each program id changes every call."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for call in range(12):
        sms = torch.randperm(8, generator=g).tolist()
        for prog in range(8):
            sm = sms[prog]
            lag = 1000 * (sm if by == "sm" else prog)
            noise = int(torch.randint(0, 100, (1,), generator=g))
            rows.append({"call": call, "program": prog, "sm": sm, st.STAMPS[1]: 10_000,
                         st.STAMPS[5]: 90_000 + lag + noise})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("by", ["sm", "program"])
def test_end_shares_name_what_the_ends_follow(seed, by):
    shares = st.end_shares(_ends(seed, by))
    other = "program" if by == "sm" else "sm"
    assert shares[f"{by}_share"] > 0.98, (shares, f"seed {seed}")
    assert shares[f"{other}_share"] < 0.5, (shares, f"seed {seed}")
    assert 2.0 < shares["end_spread_us"] < 2.5, (shares, f"seed {seed}")  # sd of 0..7 µs


@pytest.mark.slow
def test_the_patch_applies_and_the_patched_kernel_compiles_for_sm90():
    pytest.importorskip("triton.experimental.gluon")
    if not st.PATCH.exists():
        pytest.fail(f"{st.PATCH} is missing")
    rows = st.check()
    # One group: entry and wait (the default warps), four MMA stamps, two gatherer stamps;
    # two groups stamp the MMA moments in each. The SM once, at entry.
    assert [(r["groups"], r["timer_reads"], r["sm_reads"]) for r in rows] == [(1, 8, 1),
                                                                            (2, 12, 1)]
