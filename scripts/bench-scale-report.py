#!/usr/bin/env python3
"""The table scripts/bench-scale prints (and writes into BENCHMARKS.md with WRITE=1): each measurement on the small and
the big database of one run, the ratio or figure the goal is about, and whether it was met."""
import sys

# A figure recorded once per round of requests is the rounds' mean.
recorded = {}
for line in open(sys.argv[1]):
    key, _, value = line.strip().partition("=")
    recorded.setdefault(key, []).append(value)
results = {}
for key, values in recorded.items():
    try:
        numbers = [float(v) for v in values]
        results[key] = values[0] if len(values) == 1 else f"{sum(numbers) / len(numbers):.3f}"
    except ValueError:
        results[key] = values[-1]
big_users, small_users = int(sys.argv[2]), int(sys.argv[3])
engine = {"postgres": "PostgreSQL", "sqlite": "SQLite"}[sys.argv[4] if len(sys.argv) > 4 else "postgres"]


def num(key):
    try:
        return float(results.get(key, ""))
    except ValueError:
        return None


def row(label, key, goal=None, fmt="{:.0f}"):
    small, big = num("small_" + key), num("big_" + key)
    cells = [fmt.format(v) if v is not None else "—" for v in (small, big)]
    verdict = goal(small, big) if goal and small is not None and big is not None else ("", "")
    print(f"| {label} | {cells[0]} | {cells[1]} | {verdict[0]} | {verdict[1]} |")


def ratio_at_least(limit):
    return lambda small, big: (f"{big / small:.2f} big/small", "met" if big / small >= limit else f"not met (≥ {limit})")


def at_most(limit, what="big"):
    return lambda small, big: (f"{big:.0f}", "met" if max(small, big) <= limit else f"not met (≤ {limit})")


def divided(top, bottom, label):
    """Records `label` as top ÷ bottom on each database."""
    for name in ("small", "big"):
        a, b = num(f"{name}_{top}"), num(f"{name}_{bottom}")
        if a and b:
            results[f"{name}_{label}"] = f"{a / b:.3f}"


def paired(first, far, label, limit=2.0):
    for name in ("small", "big"):
        a, b = num(f"{name}_{first}"), num(f"{name}_{far}")
        if a and b:
            results[f"{name}_{label}_ratio"] = f"{b / a:.2f}"
    row(f"{label}: page 1,000 ÷ page 1 (latency)", f"{label}_ratio", lambda s, b: (f"{max(s, b):.2f}", "met" if max(s, b) <= limit else f"not met (≤ {limit})"),
        "{:.2f}")


print(f"| {engine} | small ({small_users:,} users) | big ({big_users:,} users) | figure | goal |")
print("|---|---|---|---|---|")
row("transfers", "transfers")
row("seed, s", "seed_seconds", fmt="{:.1f}")
row("GET /health, req/s", "health_rps")
row("GET /api/entitlements, req/s", "entitlements_rps", ratio_at_least(0.85))
row("POST /api/ledger/spend, req/s", "spends_rps", ratio_at_least(0.85))
pgbench = num("pgbench_tps")
if pgbench and num("big_spends_rps"):
    print(f"| spends ÷ pgbench tpcb-like ({pgbench:.0f} tps) | {num('small_spends_rps') / pgbench:.2f} | {num('big_spends_rps') / pgbench:.2f} | | 0.75 (issue 34) |")
row("sign-in (Argon2 at 64 KiB), req/s", "signin_rps", ratio_at_least(0.85))
row("history page 1, ms", "history_page1_ms", fmt="{:.2f}")
row("history page 1,000, ms", "history_page1000_ms", fmt="{:.2f}")
paired("history_page1_ms", "history_page1000_ms", "history")
row("audit page 1, ms", "audit_page1_ms", fmt="{:.2f}")
row("audit page 1,000, ms", "audit_page1000_ms", fmt="{:.2f}")
paired("audit_page1_ms", "audit_page1000_ms", "audit")
row("operators' user search, ms", "search_ms", fmt="{:.2f}")
row("expired holds swept", "sweep_holds")
row("hold sweep, s", "sweep_seconds", fmt="{:.1f}")
for name in ("small", "big"):
    holds, seconds = num(f"{name}_sweep_holds"), num(f"{name}_sweep_seconds")
    if holds and seconds:
        results[f"{name}_sweep_rate"] = f"{holds / seconds:.0f}"
    subs, seconds = num(f"{name}_drip_subscriptions"), num(f"{name}_drip_seconds")
    if subs and seconds:
        results[f"{name}_drip_rate"] = f"{subs / seconds:.0f}"
    events, seconds = num(f"{name}_fanout_events"), num(f"{name}_fanout_seconds")
    if events and seconds:
        results[f"{name}_fanout_rate"] = f"{events / seconds:.0f}"
row("hold sweep, holds/s", "sweep_rate")
row("yearly drip: subscriptions due", "drip_subscriptions")
row("yearly drip, s", "drip_seconds", fmt="{:.1f}")
row("yearly drip, subscriptions/s", "drip_rate")
row("longest transaction during sweep and drip, ms", "jobs_longest_transaction_ms", at_most(100))
row("spends p99, 4 connections, ms", "spends_4c_p99_ms", fmt="{:.2f}")
row("spends p99 during the sweep, ms", "spends_4c_p99_during_sweep_ms", fmt="{:.2f}")
divided("spends_4c_p99_during_sweep_ms", "spends_4c_p99_ms", "p99_ratio")
row("spends p99 during ÷ without", "p99_ratio", lambda s, b: (f"{b:.2f}", "met" if b < 2 else "not met (< 2)"), "{:.2f}")
row("ledger verify, s", "verify_seconds", lambda s, b: (f"{b:.1f}", "met" if b < 60 else "not met (< 60)"), "{:.1f}")
row("ledger verify peak RSS, MiB", "verify_peak_rss_mib")
row("webhook fan-out: events", "fanout_events")
row("fan-out, s", "fanout_seconds", fmt="{:.1f}")
row("fan-out, events/s", "fanout_rate")
row("longest transaction during fan-out, ms", "fanout_longest_transaction_ms", at_most(100))
row("service RSS at start, MiB", "rss_start_mib", lambda s, b: (f"{b:.1f}", "met" if b < 50 else "not met (< 50)"), "{:.1f}")
row("service RSS after the first round of requests, MiB", "rss_after_first_round_mib", fmt="{:.1f}")
row("service RSS after the last round, MiB", "rss_after_requests_mib", fmt="{:.1f}")
divided("rss_after_requests_mib", "rss_after_first_round_mib", "rss_ratio")
row("RSS after the last round ÷ after the first", "rss_ratio",
    lambda s, b: (f"{max(s, b):.2f}", "met" if 0.9 <= min(s, b) and max(s, b) <= 1.1 else "not met (±10 %)"), "{:.2f}")
row("service's own memory (RssAnon) after the first round, MiB", "own_after_first_round_mib", fmt="{:.1f}")
row("service's own memory (RssAnon) after the last round, MiB", "own_after_requests_mib", fmt="{:.1f}")
divided("own_after_requests_mib", "own_after_first_round_mib", "own_ratio")
row("own memory after the last round ÷ after the first", "own_ratio", lambda s, b: (f"{max(s, b):.2f}", ""), "{:.2f}")
row("service RSS after the jobs, MiB", "rss_after_jobs_mib", fmt="{:.1f}")
hangs = results.get("shutdown_hangs", "0")
print(f"| nodes that did not exit within 20 s of SIGTERM (whole run) | | {hangs} | | {'met' if hangs == '0' else 'not met (0)'} |")
