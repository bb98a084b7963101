-- Why: premium sticker packs (seed 000). The catalog lives in the database so operators manage it; an unlock
-- is recorded in the same transaction as the ledger spend that pays for it, and its primary key makes a pack
-- chargeable once per user even under concurrent double taps. Bought packs stay unlocked after a downgrade;
-- plan-included packs are derived from the current plan and need no row.
CREATE TABLE sticker_packs (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    description TEXT NOT NULL,
    icon_url TEXT,
    category TEXT NOT NULL CHECK (category IN ('emoji', 'custom', 'seasonal', 'branded')),
    is_premium BOOLEAN NOT NULL,
    token_price BIGINT NOT NULL CHECK (token_price >= 0),
    included_in_plans TEXT NOT NULL,
    is_active BOOLEAN NOT NULL,
    sort_order BIGINT NOT NULL,
    sticker_count BIGINT NOT NULL CHECK (sticker_count >= 0),
    preview_stickers TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL
);

CREATE TABLE pack_unlocks (
    user_id TEXT NOT NULL,
    pack_id TEXT NOT NULL REFERENCES sticker_packs (id),
    tokens_spent BIGINT NOT NULL,
    operation_id TEXT,
    created_at_ms BIGINT NOT NULL,
    PRIMARY KEY (user_id, pack_id)
);
