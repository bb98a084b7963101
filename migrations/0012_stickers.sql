-- Why: stickers inside packs (seed 000), so an unlock opens content the server enforces: premium files are served
-- only through signed, expiring URLs to users who have the pack. Files live in the blob store under content
-- addresses (image_key, thumbnail_key); a pack's sticker count and previews are derived from these rows. Catalog
-- stickers have ids "packId:slug", stable identifiers a messaging app can send in a message (seed 001). A user's own
-- uploads (owner_user_id set) live in their private pack "custom:<userId>", which has no sticker_packs row.
CREATE TABLE stickers (
    id TEXT PRIMARY KEY,
    pack_id TEXT NOT NULL,
    owner_user_id TEXT,
    name TEXT NOT NULL,
    image_key TEXT NOT NULL,
    thumbnail_key TEXT NOT NULL,
    file_type TEXT NOT NULL CHECK (file_type IN ('png', 'gif', 'webp')),
    width BIGINT NOT NULL,
    height BIGINT NOT NULL,
    is_animated BOOLEAN NOT NULL,
    bytes BIGINT NOT NULL,
    tags TEXT NOT NULL,
    sort_order BIGINT NOT NULL,
    usage_count BIGINT NOT NULL DEFAULT 0,
    created_at_ms BIGINT NOT NULL
);

CREATE INDEX stickers_by_pack ON stickers (pack_id, sort_order, id);
CREATE INDEX stickers_by_image ON stickers (image_key);
CREATE INDEX stickers_by_thumbnail ON stickers (thumbnail_key);

-- The stickers each profile used, newest first (GET /api/stickers/recent keeps 20).
CREATE TABLE sticker_uses (
    user_id TEXT NOT NULL,
    profile_id TEXT NOT NULL,
    sticker_id TEXT NOT NULL,
    used_at_ms BIGINT NOT NULL,
    PRIMARY KEY (user_id, profile_id, sticker_id)
);

CREATE INDEX sticker_uses_recent ON sticker_uses (user_id, profile_id, used_at_ms);

-- Each user's upload allowance in use: reserved by one conditional UPDATE before an upload's image work.
CREATE TABLE sticker_quotas (
    user_id TEXT PRIMARY KEY,
    stickers BIGINT NOT NULL CHECK (stickers >= 0),
    bytes BIGINT NOT NULL CHECK (bytes >= 0)
);
