-- Why: maturity ratings (issue 36). An account's own uploads carry no rating, so a profile with a maximum content rating
-- sees only the uploads it made itself: each upload remembers the profile that made it (NULL: made with no profile, or
-- before this migration — seen only by profiles without a maximum).
ALTER TABLE stickers ADD COLUMN owner_profile_id TEXT;
