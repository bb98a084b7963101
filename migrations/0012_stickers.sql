-- Why: stickers inside packs (seed 000), so an unlock opens content the server enforces: premium files are served
-- only through signed, expiring URLs to users who have the pack. Files live in the blob store under content
-- addresses (image_key, thumbnail_key); a pack's sticker_count and preview_stickers are derived from these rows.
-- Ids are "packId:slug", stable identifiers a messaging app can send in a message (seed 001).
CREATE TABLE stickers (
    id TEXT PRIMARY KEY,
    pack_id TEXT NOT NULL REFERENCES sticker_packs (id),
    name TEXT NOT NULL,
    image_key TEXT NOT NULL,
    thumbnail_key TEXT NOT NULL,
    file_type TEXT NOT NULL CHECK (file_type IN ('png', 'gif', 'webp')),
    width BIGINT NOT NULL,
    height BIGINT NOT NULL,
    is_animated BOOLEAN NOT NULL,
    tags TEXT NOT NULL,
    sort_order BIGINT NOT NULL,
    usage_count BIGINT NOT NULL DEFAULT 0,
    created_at_ms BIGINT NOT NULL
);

CREATE INDEX stickers_by_pack ON stickers (pack_id, sort_order, id);
CREATE INDEX stickers_by_image ON stickers (image_key);
CREATE INDEX stickers_by_thumbnail ON stickers (thumbnail_key);
