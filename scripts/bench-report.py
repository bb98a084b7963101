#!/usr/bin/env python3
"""Writes BENCHMARKS.md from the raw outputs scripts/bench saved in DIR."""
import datetime, os, platform, re, subprocess, sys
out, secs = sys.argv[1], sys.argv[2]
read = lambda name: open(os.path.join(out, name)).read()
def num(text, pattern):
    m = re.search(pattern, text)
    return float(m.group(1)) if m else None
clean = lambda text: "\n".join(l for l in text.splitlines() if "warning: 'swift-distributed-tracing'" not in l and "CMakeLists.txt" not in l and "NOTICE:" not in l)
signin, ent, ledger, idle = (clean(read(n)) for n in ("signin.txt", "entitlements.txt", "ledger.txt", "idle.txt"))
stickers = clean(read("stickers.txt")) if os.path.exists(os.path.join(out, "stickers.txt")) else ""
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
mem = next((int(l.split()[1]) // 1024 for l in open("/proc/meminfo") if l.startswith("MemTotal")), 0)
swift = subprocess.run(["swift", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
def to_ms(text):
    """wrk latency ("850.00us", "1.69ms", "1.20s") in milliseconds."""
    value = float(re.sub(r"[^0-9.]", "", text))
    return value / 1000 if text.endswith("us") else value if text.endswith("ms") else value * 1000
rows = []
def row(name, value, goal, ok, raw):
    rows.append(f"| {name} | {raw} | {goal} | {'(ceiling, no target)' if ok is None else 'met' if ok else '**not met**'} |")
r = num(signin, r"ratio=([0-9.]+)"); p99 = num(signin, r"health_p99_ms=([0-9.]+)")
row("sign-in vs Argon2 limit", r, "≥ 0.9", r is not None and r >= 0.9,
    f"{r} ({num(signin, r'signin_per_s=([0-9.]+)')}/s vs {num(signin, r'argon2_limit_per_s=([0-9.]+)')}/s)")
row("/health p99 during the sign-in flood", p99, "< 20 ms", p99 is not None and p99 < 20, f"{p99} ms")
for engine in ("sqlite", "postgres"):
    er = num(ent, engine + r": ratio_entitlements_vs_health=([0-9.]+)")
    ep = re.search(engine + r": low_load\([^)]*\) entitlements_rps=(\S+) p99=(\S+)", ent)
    ent_rps = num(ent, engine + r": health_rps=\S+ health_p99=\S+ entitlements_rps=([0-9.]+)")
    health_rps = num(ent, engine + r": health_rps=([0-9.]+)")
    goal = {"sqlite": 0.8, "postgres": 0.6}[engine]
    row(f"entitlements vs /health ({engine})", er, f"≥ {goal}", er is not None and er >= goal, f"{er} ({ent_rps} vs {health_rps} req/s)")
    ready = re.search(engine + r": ready_rps=([0-9.]+).*entitlements server=(\d+) database=(\d+)", ent)
    rr = num(ent, engine + r": ratio_entitlements_vs_health=\S+ \(goal >= [0-9.]+\) ratio_ready_vs_health=([0-9.]+)")
    if ready and rr is not None:
        row(f"/ready (one SELECT 1) vs /health ({engine})", rr, "—", None,
            f"{rr} ({ready.group(1)} req/s); entitlements CPU per request: server {ready.group(2)} µs, database {ready.group(3)} µs")
    if ep:
        ms = to_ms(ep.group(2))
        row(f"entitlements p99 at low load ({engine})", ms, "< 5 ms", ms < 5, ep.group(2))
lr = num(ledger, r"ratio_postgres_many_users_vs_pgbench=([0-9.]+)")
many = num(ledger, r"ledger_postgres_many\S*_spends_per_s=([0-9.]+)")
pgb = num(ledger, r"pgbench_tpcb_like_tps=([0-9.]+)")
row("ledger spends vs pgbench (PostgreSQL, many users)", lr, "≥ 0.75", lr is not None and lr >= 0.75, f"{lr} ({many}/s vs {pgb} tps)")
hot = num(ledger, r"postgres_hot_user_spends_per_s=([0-9.]+)")
row("ledger spends, one hot user (PostgreSQL)", hot, "≥ 2,000/s", hot is not None and hot >= 2000, f"{hot}/s")
s1, s2 = num(ledger, r"sqlite_many_users_spends_per_s=([0-9.]+)"), num(ledger, r"sqlite_hot_user_spends_per_s=([0-9.]+)")
row("ledger spends (SQLite, many users / hot user)", s1, "≥ 2,000/s", s1 is not None and s1 >= 2000 and (s2 or 0) >= 2000, f"{s1}/s / {s2}/s")
for engine in ("sqlite", "postgres"):
    cr = num(stickers, engine + r": ratio_catalog_full_vs_health=\S+ ratio_catalog_304_vs_health=([0-9.]+)")
    full = num(stickers, engine + r": ratio_catalog_full_vs_health=([0-9.]+)")
    rps304 = num(stickers, engine + r": catalog_bytes=\S+ health_rps=\S+ catalog_full_rps=\S+ catalog_304_rps=([0-9.]+)")
    row(f"sticker catalog revalidation (304) vs /health ({engine})", cr, "≥ 0.3", cr is not None and cr >= 0.3,
        f"{cr} ({rps304} req/s); full 470 KB answers: {full}")
thumbs = num(stickers, r"one_core_per_s=([0-9.]+)")
row("thumbnails of a 1024×1024 PNG (one core)", thumbs, "—", None, f"{thumbs}/s")
irss = num(idle, r"idle_rss_mib=([0-9.]+)")
row("idle RSS (release, SQLite)", irss, "< 50 MiB", irss is not None and irss < 50, f"{irss} MiB")
verify_ok = ledger.count("ledger verify: OK")
# scripts/bench-scale's tables (written by its own runs, which take longer) are kept as they are.
scale = ""
if os.path.exists("BENCHMARKS.md"):
    import re
    blocks = re.findall(r"<!-- bench-scale \w+:start -->.*?<!-- bench-scale \w+:end -->", open("BENCHMARKS.md").read(), flags=re.S)
    if blocks:
        scale = "\n## At scale (`scripts/bench-scale`, its own runs)\n\n" + "\n\n".join(blocks) + "\n"
with open("BENCHMARKS.md", "w") as f:
    f.write(f"""# Benchmarks

Written by `scripts/bench {secs}` on {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}. Every ratio compares two
figures measured in the same run on the same machine; release build; load from `wrk` on loopback.

Machine: {os.cpu_count()} cores ({cpu}), {mem} MiB RAM, {platform.system()} {platform.release()}; {swift}.

| benchmark | measured | target | |
|---|---|---|---|
""" + "\n".join(rows) + f"""

`ledger verify` after the ledger runs: {verify_ok} × OK.

## Raw output

### Sign-in (`scripts/bench-signin {secs}`)
```
{signin.strip()}
```

### Entitlements (`scripts/bench-entitlements {secs}`)
```
{ent.strip()}
```

### Ledger (`scripts/bench-ledger {secs}`)
```
{ledger.strip()}
```

### Sticker catalog (`scripts/bench-stickers {secs}`)
```
{stickers.strip()}
```

### Idle RSS
```
{idle.strip()}
```
""" + scale)
print("wrote BENCHMARKS.md")
print("\n".join(rows))
