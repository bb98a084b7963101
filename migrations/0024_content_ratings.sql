-- Why: maturity ratings (issue 36). A sticker pack carries a content rating on the App Store's scale ('all', '9+',
-- '13+', '16+', '18+'; existing packs are open to all); a family profile may carry the highest rating it may see (Auth's
-- column, NULL = no maximum), set by the owner. Listings, the catalog, search, use, unlock and reserve respect it.
ALTER TABLE sticker_packs ADD COLUMN content_rating TEXT NOT NULL DEFAULT 'all';
ALTER TABLE family_profiles ADD COLUMN max_content_rating TEXT;
