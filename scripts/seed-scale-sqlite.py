#!/usr/bin/env python3
"""scripts/seed-scale for SQLite (it calls this when DATABASE_URL is sqlite:…): the same rows as the PostgreSQL seed,
set-based through recursive CTEs in one transaction, so `account-service ledger verify` passes. The default size is a
tenth of PostgreSQL's (100,000 users, 1,000,000 entries). Prints the wall time of each step.
Usage: python3 scripts/seed-scale-sqlite.py PATH USERS TRANSFERS HOLDS DELIVERIES AUDIT HEAVY"""
import hashlib
import sqlite3
import sys
import time

path = sys.argv[1]
users, transfers, holds, deliveries, audit, heavy = (int(v) for v in sys.argv[2:8])
per_user = transfers // users
if per_user < 3:
    sys.exit("TRANSFERS must be at least 3 × USERS")
params = {"users": users, "spends": per_user - 2, "holds": min(holds, users), "deliveries": deliveries, "audit": audit,
          "heavy": heavy, "now": int(time.time() * 1000), "day": 86_400_000}
db = sqlite3.connect(path, isolation_level=None)
db.create_function("sha256hex", 1, lambda text: hashlib.sha256(text.encode()).hexdigest(), deterministic=True)
db.execute("PRAGMA synchronous = OFF")
# Numbers 1…n as a table: SQLite's generate_series is an extension Python's module does not load.
db.execute("CREATE TEMP TABLE g (n INTEGER PRIMARY KEY)")
db.execute("INSERT INTO g WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < max(:users, :audit, :heavy, :deliveries)) "
           "SELECT n FROM c", params)
db.execute("CREATE TEMP TABLE k AS SELECT n FROM g WHERE n <= :spends", params)

STEPS = {
    "users": """
INSERT INTO users (id, email, name, password_hash, email_verified, role, prompt_enhancement_enabled, created_at_ms, updated_at_ms)
SELECT 'scale-' || n, 'scale' || n || '@example.com', 'Scale ' || n, NULL, 1, 'user', 1, :now - n, :now - n FROM g WHERE n <= :users;
INSERT INTO family_profiles (id, user_id, name, is_default, can_make_purchases, can_use_custom_content_types, created_at_ms, updated_at_ms)
SELECT 'scale-profile-' || n, 'scale-' || n, 'Scale ' || n, 1, 1, 1, :now - n, :now - n FROM g WHERE n <= :users;
INSERT INTO sessions (id, user_id, token_hash, created_at_ms, last_used_at_ms, expires_at_ms, authenticated_at_ms)
SELECT 'scale-session-' || n, 'scale-' || n, sha256hex('scale-token-' || n), :now, :now, :now + 30 * :day, :now FROM g WHERE n <= :users;
INSERT INTO subscriptions (user_id, plan_id, status, provider, current_period_start_ms, current_period_end_ms, will_renew, updated_at_ms)
SELECT 'scale-' || n, plan, 'active', 'manual', CASE WHEN plan LIKE '%yearly' THEN :now - 32 * :day ELSE :now - :day END,
    CASE WHEN plan LIKE '%yearly' THEN :now + 333 * :day ELSE :now + 29 * :day END, 1, :now
FROM (SELECT n, CASE n / 3 % 6 WHEN 0 THEN 'basic_monthly' WHEN 1 THEN 'basic_yearly' WHEN 2 THEN 'pro_monthly' WHEN 3 THEN 'pro_yearly'
    WHEN 4 THEN 'max_monthly' ELSE 'business_monthly' END AS plan FROM g WHERE n <= :users AND n % 3 = 0);
""",
    "ledger": """
INSERT INTO ledger_accounts (id, user_id, bucket, balance, created_at_ms)
SELECT 'user:scale-' || n || ':' || b, 'scale-' || n, b, 0, :now FROM g, (SELECT 'bonus' AS b UNION ALL SELECT 'subscription' UNION ALL
    SELECT 'purchased') WHERE n <= :users;
INSERT INTO ledger_transfers (id, operation_id, debit_account_id, credit_account_id, amount, reason, user_id, user_amount, user_bucket,
                              user_balance_after, created_at_ms)
SELECT 'scale-t-' || n || '-0', 'scale-op-' || n || '-0', 'system:issuance', 'user:scale-' || n || ':purchased', 1000, 'purchase',
    'scale-' || n, 1000, 'purchased', 1000, :now - :day FROM g WHERE n <= :users;
INSERT INTO ledger_transfers (id, operation_id, debit_account_id, credit_account_id, amount, reason, user_id, user_amount, user_bucket,
                              user_balance_after, created_at_ms)
SELECT 'scale-t-' || g.n || '-' || k.n, 'scale-op-' || g.n || '-' || k.n, 'user:scale-' || g.n || ':purchased', 'system:consumption', 1,
    'generation', 'scale-' || g.n, -1, 'purchased', 1000 - k.n, :now - :day + k.n * 1000 FROM g, k WHERE g.n <= :users;
INSERT INTO ledger_lots (id, user_id, granted, remaining, expires_at_ms, created_at_ms)
SELECT 'scale-lot-' || n, 'scale-' || n, 50, 30, :now + 30 * :day, :now - 3600000 FROM g WHERE n <= :users AND n % 2 = 0;
INSERT INTO ledger_transfers (id, operation_id, debit_account_id, credit_account_id, amount, reason, user_id, user_amount, user_bucket,
                              user_balance_after, created_at_ms)
SELECT 'scale-b-' || n || '-' || x, 'scale-bop-' || n || '-' || x,
    CASE WHEN x = 1 THEN 'system:issuance' ELSE 'user:scale-' || n || ':bonus' END,
    CASE WHEN x = 1 THEN 'user:scale-' || n || ':bonus' ELSE 'system:consumption' END, CASE WHEN x = 1 THEN 50 ELSE 20 END,
    CASE WHEN x = 1 THEN 'promotion' ELSE 'generation' END, 'scale-' || n, CASE WHEN x = 1 THEN 50 ELSE -20 END, 'bonus',
    1000 - :spends + CASE WHEN x = 1 THEN 50 ELSE 30 END, :now - 3600000 + x
FROM g, (SELECT 1 AS x UNION ALL SELECT 2) WHERE n <= :users AND n % 2 = 0;
UPDATE ledger_accounts SET balance = 1000 - :spends WHERE bucket = 'purchased' AND id LIKE 'user:scale-%';
UPDATE ledger_accounts SET balance = 30 WHERE bucket = 'bonus' AND id LIKE 'user:scale-%' AND CAST(substr(user_id, 7) AS INTEGER) % 2 = 0;
""",
    "holds_unlocks_deliveries": """
INSERT INTO ledger_holds (id, user_id, amount, status, reason, metadata, expires_at_ms, created_at_ms)
SELECT 'scale-hold-' || n, 'scale-' || n, 1, 'pending', 'generation', NULL, :now - 3600000, :now - 7200000 FROM g WHERE n <= :holds;
INSERT INTO ledger_hold_parts (hold_id, part, bucket, lot_id, amount) SELECT 'scale-hold-' || n, 0, 'purchased', NULL, 1 FROM g WHERE n <= :holds;
INSERT INTO ledger_transfers (id, operation_id, debit_account_id, credit_account_id, amount, reason, user_id, user_amount, user_bucket,
                              user_balance_after, hold_id, created_at_ms)
SELECT 'scale-h-' || n, 'scale-hold-' || n, 'user:scale-' || n || ':purchased', 'system:holds', 1, 'hold', 'scale-' || n, -1, 'purchased',
    NULL, 'scale-hold-' || n, :now - 7200000 FROM g WHERE n <= :holds;
UPDATE ledger_accounts SET balance = balance - 1 WHERE bucket = 'purchased' AND id LIKE 'user:scale-%'
    AND CAST(substr(user_id, 7) AS INTEGER) <= :holds;
INSERT INTO sticker_packs (id, name, description, icon_url, category, is_premium, token_price, included_in_plans, is_active, sort_order,
                           sticker_count, preview_stickers, created_at_ms, updated_at_ms)
VALUES ('scale-pack', 'Scale pack', 'Seeded by scripts/seed-scale', NULL, 'seasonal', 1, 5, '[]', 1, 100, 0, '[]', :now, :now);
INSERT INTO pack_unlocks (user_id, pack_id, tokens_spent, operation_id, created_at_ms)
SELECT 'scale-' || n, 'scale-pack', 5, 'scale-unlock-' || n, :now - 1800000 FROM g WHERE n <= :users AND n % 4 = 0;
INSERT INTO ledger_transfers (id, operation_id, debit_account_id, credit_account_id, amount, reason, user_id, user_amount, user_bucket,
                              user_balance_after, metadata, created_at_ms)
SELECT 'scale-u-' || n, 'scale-unlock-' || n, 'user:scale-' || n || ':purchased', 'system:consumption', 5, 'pack_unlock', 'scale-' || n,
    -5, 'purchased', NULL, '{"packId":"scale-pack"}', :now - 1800000 FROM g WHERE n <= :users AND n % 4 = 0;
UPDATE ledger_accounts SET balance = balance - 5 WHERE bucket = 'purchased' AND id LIKE 'user:scale-%'
    AND CAST(substr(user_id, 7) AS INTEGER) % 4 = 0;
INSERT INTO webhook_deliveries (id, endpoint_id, event_id, event_type, body, status, attempts, next_attempt_at_ms, retry_until_ms,
                                last_status_code, last_attempt_at_ms, created_at_ms, delivered_at_ms)
SELECT 'scale-d-' || n, 'scale-endpoint', 'evt-scale-' || n, 'tokens.spent', '{}', 'delivered', 1, t, t, 200, t, t, t
FROM (SELECT n, :now - (n % 60) * :day - 1000 AS t FROM g WHERE n <= :deliveries);
INSERT INTO webhook_attempts (delivery_id, attempt, at_ms, status_code, error, duration_ms)
SELECT 'scale-d-' || n, 1, :now - (n % 60) * :day - 1000, 200, NULL, 5 FROM g WHERE n <= :deliveries;
""",
    "audit_heavy": """
INSERT INTO audit_log (id, at_ms, actor, action, subject, ip, detail)
SELECT 'scale-a-' || n, :now - (n % 300) * :day - n % :day, 'user:scale-' || (n % :users + 1), 'sign_in', 'scale-' || (n % :users + 1),
    '203.0.113.7', NULL FROM g WHERE n <= :audit;
INSERT INTO users (id, email, name, password_hash, email_verified, role, prompt_enhancement_enabled, created_at_ms, updated_at_ms)
VALUES ('scale-heavy', 'scale-heavy@example.com', 'Scale heavy', NULL, 1, 'user', 1, :now, :now);
INSERT INTO ledger_accounts (id, user_id, bucket, balance, created_at_ms)
SELECT 'user:scale-heavy:' || b, 'scale-heavy', b, CASE WHEN b = 'purchased' THEN 1000 ELSE 0 END, :now
FROM (SELECT 'bonus' AS b UNION ALL SELECT 'subscription' UNION ALL SELECT 'purchased');
INSERT INTO ledger_transfers (id, operation_id, debit_account_id, credit_account_id, amount, reason, user_id, user_amount, user_bucket,
                              user_balance_after, created_at_ms)
VALUES ('scale-heavy-0', 'scale-heavy-op-0', 'system:issuance', 'user:scale-heavy:purchased', :heavy + 1000, 'purchase', 'scale-heavy',
    :heavy + 1000, 'purchased', :heavy + 1000, :now - :day);
INSERT INTO ledger_transfers (id, operation_id, debit_account_id, credit_account_id, amount, reason, user_id, user_amount, user_bucket,
                              user_balance_after, created_at_ms)
SELECT 'scale-heavy-' || n, 'scale-heavy-op-' || n, 'user:scale-heavy:purchased', 'system:consumption', 1, 'generation', 'scale-heavy', -1,
    'purchased', :heavy + 1000 - n, :now - :day + n FROM g WHERE n <= :heavy;
""",
    "analyze": "ANALYZE;",
}

for name, script in STEPS.items():
    start = time.time()
    db.execute("BEGIN")
    for statement in (s.strip() for s in script.split(";\n")):
        if statement:
            db.execute(statement.rstrip(";"), {k: v for k, v in params.items() if ":" + k in statement})
    db.execute("COMMIT")
    print(f"seed_{name}_seconds={time.time() - start:.1f}", flush=True)


def count(sql):
    return db.execute(sql).fetchone()[0]


pending = count("SELECT COUNT(*) FROM ledger_holds WHERE status = 'pending'")
print(f"users={count('SELECT COUNT(*) FROM users')} transfers={count('SELECT COUNT(*) FROM ledger_transfers')} pending_holds={pending} "
      f"deliveries={count('SELECT COUNT(*) FROM webhook_deliveries')} database_mib={count('PRAGMA page_count') * count('PRAGMA page_size') // 1048576}")
