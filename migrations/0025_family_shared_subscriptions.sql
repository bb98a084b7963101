-- Why: Apple Family Sharing (issue 36). A subscription a family member receives through Family Sharing
-- (`inAppOwnershipType` FAMILY_SHARED) gives the plan's features; its periods grant no tokens unless the plan says so
-- (`familySharedTokens`), so the purchaser's tokens are not multiplied by the family's size.
ALTER TABLE subscriptions ADD COLUMN family_shared BOOLEAN NOT NULL DEFAULT FALSE;
