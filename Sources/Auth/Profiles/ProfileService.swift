import Clock
import Foundation
import Logging
import Storage

/// How many profiles (the default included) the user's current plan allows. Provided by the app, which
/// knows subscriptions and the plan catalog; read inside the caller's transaction.
public protocol ProfilePlanLimits: Sendable {
    func maxFamilyProfiles(userID: String, now: Date, _ tx: any SQLExecutor) async throws -> Int
}

/// A profile as listed to its account: `isLocked` when it lies beyond the current plan's limit.
public struct ProfileView: Sendable, Equatable {
    public let profile: FamilyProfile
    public let isLocked: Bool
}

/// The profile a session acts as, checked against the plan on every request that uses it.
public enum SessionProfile: Sendable, Equatable {
    /// Nothing selected (a fresh sign-in): the account's default profile, the owner's.
    case defaultProfile(FamilyProfile)
    /// The selected profile, still within the plan's limit.
    case selected(FamilyProfile)
    /// The selected profile was deleted, or lies beyond the plan's profile limit since a downgrade. The session never
    /// falls back to the owner's profile: the app asks the user to select again.
    case selectionRequired
    /// The account has no profile at all (never true of a verified account).
    case none

    /// The profile to act as, if any.
    public var profile: FamilyProfile? {
        switch self {
        case .defaultProfile(let p), .selected(let p): p
        case .selectionRequired, .none: nil
        }
    }

    /// Whether a session acting as this may read `profileID`'s usage: the owner (the default profile) reads every
    /// profile's, any other profile only its own.
    public func maySeeUsage(of profileID: String) -> Bool {
        guard let profile else { return false }
        return profile.isDefault || profile.id == profileID
    }
}

/// What a create or update sets (the seed's `CreateProfileRequest` plus `removePin`).
public struct ProfileInput: Sendable {
    public var name: String
    public var avatar: String?
    public var pin: String?
    public var removePin: Bool
    public var canMakePurchases: Bool
    public var canUseCustomContentTypes: Bool
    /// A new monthly token allowance (nil: leave it as it is; a new profile has none).
    public var monthlyTokenAllowance: Int64?
    /// Remove the allowance (no cap).
    public var removeMonthlyTokenAllowance: Bool
    /// A new maximum content rating (nil: leave it as it is; a new profile has none). The caller checks it is on its scale.
    public var maxContentRating: String?
    /// Remove the maximum (the profile sees everything).
    public var removeMaxContentRating: Bool

    public init(
        name: String, avatar: String?, pin: String?, removePin: Bool, canMakePurchases: Bool, canUseCustomContentTypes: Bool,
        monthlyTokenAllowance: Int64? = nil, removeMonthlyTokenAllowance: Bool = false, maxContentRating: String? = nil,
        removeMaxContentRating: Bool = false
    ) {
        self.maxContentRating = maxContentRating
        self.removeMaxContentRating = removeMaxContentRating
        self.monthlyTokenAllowance = monthlyTokenAllowance
        self.removeMonthlyTokenAllowance = removeMonthlyTokenAllowance
        self.name = name
        self.avatar = avatar
        self.pin = pin
        self.removePin = removePin
        self.canMakePurchases = canMakePurchases
        self.canUseCustomContentTypes = canUseCustomContentTypes
    }
}

/// Who manages a profile: the account's owner (through a session on the default profile) or an operator.
public enum ProfileManager: Sendable {
    case owner(AuthenticatedSession, currentPassword: String?)
    case operatorActor(String, ip: String?)

    /// The owner's session making the change (nil for an operator).
    var sessionID: String? {
        if case .owner(let session, _) = self { session.sessionID } else { nil }
    }

    /// An owner's session must still be live when the change is written (``AuthenticatedSession/requireStillLive(_:)``);
    /// an operator's console session was checked by its own route.
    func requireStillLive(_ tx: any SQLExecutor, now: Date) async throws {
        if case .owner(let session, _) = self { try await session.requireStillLive(tx, now: now) }
    }
}

/// Called inside a profile's deletion transaction so other modules can close what they keep for it (its pending
/// purchase requests are cancelled and their tokens released).
public protocol ProfileDeletionHook: Sendable {
    func profileDeleted(userID: String, profileID: String, at: Date, executor: any SQLExecutor) async throws
}

public struct NoProfileDeletionHook: ProfileDeletionHook {
    public init() {}
    public func profileDeleted(userID: String, profileID: String, at: Date, executor: any SQLExecutor) async throws {}
}

/// Family profiles: plan-limited, owner-managed, PIN-protected with a stored lockout.
public struct ProfileService: Sendable {
    let database: any Database
    let hasher: PasswordHasher
    let clock: any TimeSource
    let policy: AuthPolicy
    let limits: any ProfilePlanLimits
    let passwords: PasswordCheck
    let deletion: any ProfileDeletionHook
    /// The `family_profiles` table's statements.
    let store = ProfileStore()

    /// `passwords` is the auth service's (``AuthService/passwords``): PIN changes check the password in the same budget.
    public init(
        database: any Database, hasher: PasswordHasher, clock: any TimeSource, policy: AuthPolicy, passwords: PasswordCheck,
        limits: any ProfilePlanLimits, deletion: any ProfileDeletionHook = NoProfileDeletionHook()
    ) {
        self.deletion = deletion
        self.database = database
        self.hasher = hasher
        self.clock = clock
        self.policy = policy
        self.passwords = passwords
        self.limits = limits
    }

    /// The account's profiles: default first, then oldest first; those beyond the plan's limit are locked.
    public func available(userID: String, logger: Logger) async throws -> [ProfileView] {
        try await database.withConnection(logger: logger) { tx in try await views(tx, userID: userID, now: clock.now()) }
    }

    func views(_ tx: any SQLExecutor, userID: String, now: Date) async throws -> [ProfileView] {
        let limit = try await limits.maxFamilyProfiles(userID: userID, now: now, tx)
        return try await store.all(tx, userID: userID).enumerated().map { index, profile in ProfileView(profile: profile, isLocked: index >= limit) }
    }

    /// The profile `session` acts as right now: its selection is re-checked against the current plan (a downgrade locks
    /// profiles beyond the limit, and a session that had selected one must select again).
    public func sessionProfile(_ session: AuthenticatedSession, logger: Logger) async throws -> SessionProfile {
        try await database.withConnection(logger: logger) { tx in
            guard let selectedID = session.selectedProfileID else {
                return try await store.defaultProfile(tx, userID: session.user.id).map { .defaultProfile($0) } ?? .none
            }
            guard let view = try await views(tx, userID: session.user.id, now: clock.now()).first(where: { $0.profile.id == selectedID }),
                !view.isLocked
            else { return .selectionRequired }
            return .selected(view.profile)
        }
    }

    /// Binds a profile to the session. A PIN profile needs its PIN (``pinGate(profileID:pin:logger:_:)``).
    public func select(_ session: AuthenticatedSession, profileID: String, pin: String?, logger: Logger) async throws -> FamilyProfile {
        let userID = session.user.id
        let (profile, attempt) = try await pinGate(userID: userID, profileID: profileID, pin: pin, logger: logger) { tx, now in
            guard let view = try await views(tx, userID: userID, now: now).first(where: { $0.profile.id == profileID }) else {
                throw AuthError.notFound
            }
            if view.isLocked { throw AuthError.subscriptionRequired("This profile is beyond your plan's profile limit; upgrade to use it.") }
            return view.profile
        }
        try await database.transaction(logger: logger) { tx in
            try await session.requireStillLive(tx, now: clock.now(), reselecting: true)
            try await pinSucceeded(tx, attempt)
            try await SessionStore().select(tx, profileID: profileID, sessionID: session.sessionID)
        }
        return profile
    }

    /// The owner's consent: the session must act as the account's default (owner's) profile, and give that profile's
    /// PIN when it has one, on the same PIN budget as selecting it. The PIN is checked now (Argon2, outside any
    /// transaction); what comes back is run first by the consented write, in its own transaction: the session still
    /// live and acting as the owner, the PIN still the one checked (a PIN changed meanwhile refuses the write), then
    /// the PIN's budget starts again.
    public func ownerConsent(
        _ session: AuthenticatedSession, pin: String?, logger: Logger
    ) async throws -> @Sendable (any SQLExecutor) async throws -> Void {
        let current = try await sessionProfile(session, logger: logger)
        guard let owner = current.profile, owner.isDefault else {
            throw AuthError.ownerProfileRequired
        }
        let (_, attempt) = try await pinGate(userID: session.user.id, profileID: owner.id, pin: pin, logger: logger) { _, _ in owner }
        return { tx in
            try await session.requireStillLive(tx, now: clock.now())
            try await pinSucceeded(tx, attempt)
        }
    }

    /// What the PIN gate let through: the profile's PIN as it was checked (nil: none), and the attempt that was reserved
    /// and matched. ``pinSucceeded(_:_:)`` makes sure the PIN is still that one and starts the budget again.
    struct PINAttempt: Sendable {
        let profileID: String
        let pinHash: String?
        let key: String
        let attempt: Int
    }

    /// The PIN gate, in one place. In one transaction `load` finds the profile (and refuses what it must); when the
    /// profile has a PIN, an attempt is reserved in its budget before Argon2 runs (5 in a row, then a 15-minute lock), so
    /// parallel guesses cannot exceed the limit, and a wrong PIN writes nothing afterwards. nil attempt: no PIN.
    func pinGate<T: Sendable>(
        userID: String, profileID: String, pin: String?, logger: Logger, _ load: @escaping @Sendable (any SQLExecutor, Date) async throws -> T
    ) async throws -> (T, PINAttempt) {
        let key = BudgetKeys.pin(profileID: profileID)
        let rule = policy.pinRule
        let reserved: (value: T, pinHash: String?, attempt: Int) = try await database.transaction(lane: key, logger: logger) { tx in
            let now = clock.now()
            let value = try await load(tx, now)
            guard let pinHash = try await store.pinHash(tx, id: profileID) else { return (value, nil, 0) }
            guard let pin, !pin.isEmpty else {
                let (remaining, refusal) = try await AttemptBudget.peek(tx, key: key, rule: rule, now: now)
                if case .refused(let seconds, _) = refusal { throw AuthError.pinLocked(retryAfterSeconds: seconds) }
                throw AuthError.invalidPIN(attemptsRemaining: remaining)
            }
            // A PIN that cannot be one (not 4 to 6 ASCII digits) is refused without costing a guess.
            guard (4...6).contains(pin.utf8.count), pin.utf8.allSatisfy({ (0x30...0x39).contains($0) }) else {
                throw AuthError.validation("PIN must be 4 to 6 digits.")
            }
            switch try await AttemptBudget.reserve(tx, key: key, rule: rule, now: now) {
            case .reserved(let attempt): return (value, pinHash, attempt)
            case .refused(let seconds, _): throw AuthError.pinLocked(retryAfterSeconds: seconds)
            }
        }
        let passed = PINAttempt(profileID: profileID, pinHash: reserved.pinHash, key: key, attempt: reserved.attempt)
        guard let pinHash = reserved.pinHash else { return (reserved.value, passed) }
        if !(try await verify(pin ?? "", pinHash)) {
            guard reserved.attempt >= rule.limit else { throw AuthError.invalidPIN(attemptsRemaining: rule.limit - reserved.attempt) }
            try await database.transaction(logger: logger) { tx in
                try await AuditLog.record(
                    tx, at: clock.now(), actor: userID, action: "profile_pin_locked", subject: userID, ip: nil, detail: profileID)
            }
            throw AuthError.pinLocked(retryAfterSeconds: Int(rule.lockSeconds))
        }
        return (reserved.value, passed)
    }

    /// In the transaction that acts on a passed gate: the profile's PIN must still be the one checked, held until the
    /// transaction ends (a PIN set or removed meanwhile, which makes every session choose again, would otherwise be
    /// overtaken by a choice made with the old PIN, or with none). Then the budget starts again.
    func pinSucceeded(_ tx: any SQLExecutor, _ passed: PINAttempt) async throws {
        guard let current = try await store.heldPIN(tx, id: passed.profileID) else { throw AuthError.notFound }  // deleted meanwhile
        guard current == passed.pinHash else {
            throw AuthError.invalidPIN(attemptsRemaining: policy.pinRule.limit)  // a change starts the budget again
        }
        if passed.pinHash != nil {
            try await AttemptBudget.succeeded(tx, key: passed.key, attempt: passed.attempt, now: clock.now())
        }
    }

    public func create(userID: String, input: ProfileInput, by manager: ProfileManager, logger: Logger) async throws -> FamilyProfile {
        let owner = try await checkManager(manager, userID: userID, settingPIN: input.pin != nil, logger: logger)
        try Self.validate(input)
        let pinHash = try await input.pin.asyncMap { try await hashPIN($0) }
        return try await uniqueNameGuard {
            try await database.transaction(logger: logger) { tx in
                let now = clock.now()
                try await manager.requireStillLive(tx, now: now)
                // Lock the account row: concurrent creates for one account are serialized, so the limit holds.
                guard try await UserStore().isLive(tx, id: userID, lock: true) else {
                    throw AuthError.notFound
                }
                let limit = try await limits.maxFamilyProfiles(userID: userID, now: now, tx)
                let existing = try await store.names(tx, userID: userID)
                if existing.count >= limit { throw AuthError.profileLimitReached(limit: limit) }
                try Self.checkUniqueName(input.name, among: existing)
                let id = FreshID.uuid()
                try await store.insert(tx, id: id, userID: userID, name: Self.trimmed(input.name), input: input, pinHash: pinHash, now: now)
                try await audit(tx, manager: manager, owner: owner, userID: userID, action: "profile_created", profileID: id, now: now)
                return try await load(tx, id: id, userID: userID)
            }
        }
    }

    public func update(
        userID: String, profileID: String, input: ProfileInput, by manager: ProfileManager, logger: Logger
    ) async throws -> FamilyProfile {
        let owner = try await checkManager(manager, userID: userID, settingPIN: input.pin != nil || input.removePin, logger: logger)
        try Self.validate(input)
        let pinHash = try await input.pin.asyncMap { try await hashPIN($0) }
        return try await uniqueNameGuard {
            try await database.transaction(logger: logger) { tx in
                let now = clock.now()
                try await manager.requireStillLive(tx, now: now)
                let current = try await load(tx, id: profileID, userID: userID)
                if current.isDefault && !input.canMakePurchases {
                    throw AuthError.validation("The default profile is the owner's and can always make purchases.")
                }
                if current.isDefault && input.monthlyTokenAllowance != nil {
                    throw AuthError.validation("The default profile is the owner's and has no allowance.")
                }
                if current.isDefault && input.maxContentRating != nil {
                    throw AuthError.validation("The default profile is the owner's and has no maximum content rating.")
                }
                try Self.checkUniqueName(input.name, among: try await store.names(tx, userID: userID, except: profileID))
                try await store.update(tx, id: profileID, userID: userID, name: Self.trimmed(input.name), input: input, pinHash: pinHash, now: now)
                if pinHash != nil || input.removePin { try await AttemptBudget.clear(tx, key: BudgetKeys.pin(profileID: profileID)) }
                if pinHash != nil {
                    try await SessionStore().requireReselection(tx, profileID: profileID, userID: userID, except: manager.sessionID)
                }
                try await audit(tx, manager: manager, owner: owner, userID: userID, action: "profile_updated", profileID: profileID, now: now)
                return try await load(tx, id: profileID, userID: userID)
            }
        }
    }

    /// Deletes a non-default profile. Sessions that had it selected keep the dangling selection: they act as no profile
    /// (``SessionProfile/selectionRequired``) until they select one, and never become the owner's.
    public func delete(userID: String, profileID: String, by manager: ProfileManager, logger: Logger) async throws {
        let owner = try await checkManager(manager, userID: userID, settingPIN: false, logger: logger)
        // Deleting voids the profile's pending holds, which locks the user's ledger rows: their lane.
        try await database.transaction(lane: RowLanes.user(userID), logger: logger) { tx in
            let now = clock.now()
            try await manager.requireStillLive(tx, now: now)
            let profile = try await load(tx, id: profileID, userID: userID)
            if profile.isDefault { throw AuthError.forbidden("The default profile cannot be deleted.") }
            try await store.delete(tx, id: profileID, userID: userID)
            try await deletion.profileDeleted(userID: userID, profileID: profileID, at: now, executor: tx)
            try await AttemptBudget.clear(tx, key: BudgetKeys.pin(profileID: profileID))
            try await audit(tx, manager: manager, owner: owner, userID: userID, action: "profile_deleted", profileID: profileID, now: now)
        }
    }

    /// Operator: clears a profile's PIN and its lock.
    public func resetPIN(userID: String, profileID: String, by manager: ProfileManager, logger: Logger) async throws -> FamilyProfile {
        try await database.transaction(logger: logger) { tx in
            let now = clock.now()
            _ = try await load(tx, id: profileID, userID: userID)
            try await store.setPIN(tx, id: profileID, pinHash: nil, now: now)
            try await AttemptBudget.clear(tx, key: BudgetKeys.pin(profileID: profileID))
            try await audit(tx, manager: manager, owner: false, userID: userID, action: "profile_pin_reset", profileID: profileID, now: now)
            return try await load(tx, id: profileID, userID: userID)
        }
    }

    // MARK: - Rules

    /// Owners manage profiles only from the default profile; setting or removing a PIN also needs the
    /// password or a sign-in within the last 10 minutes. Operators pass. Returns whether it is the owner.
    func checkManager(_ manager: ProfileManager, userID: String, settingPIN: Bool, logger: Logger) async throws -> Bool {
        guard case .owner(let session, let currentPassword) = manager else { return false }
        if session.selectedProfileGone { throw AuthError.profileSelectionRequired }
        let defaultID = try await database.withConnection(logger: logger) { tx in
            try await store.defaultProfileID(tx, userID: userID)
        }
        guard session.isOwnerProfile && (session.selectedProfileID == nil || session.selectedProfileID == defaultID) else {
            throw AuthError.forbidden("Only the account owner (the default profile) can manage profiles; switch to it first.")
        }
        guard settingPIN else { return true }
        if policy.isRecent(authenticatedAt: session.authenticatedAt, now: clock.now()) { return true }
        guard let currentPassword else {
            throw AuthError.forbidden("Changing a PIN needs currentPassword in the body (or a sign-in within the last 10 minutes).")
        }
        try await passwords.require(currentPassword, of: session.user, ip: nil, logger: logger)
        return true
    }

    static func validate(_ input: ProfileInput) throws {
        if let problem = InputRules.textProblem(input.name, field: "Profile name", charactersMax: 30, bytesMax: 120) {
            throw AuthError.validation(problem)
        }
        if let avatar = input.avatar, !isValidAvatar(avatar) {
            throw AuthError.validation("Avatar must be one emoji (at most 64 bytes) or an https URL of at most 512 bytes.")
        }
        if let pin = input.pin, !(4...6).contains(pin.utf8.count) || !pin.utf8.allSatisfy({ (0x30...0x39).contains($0) }) {
            throw AuthError.validation("PIN must be 4 to 6 digits.")
        }
        if input.pin != nil && input.removePin { throw AuthError.validation("Give either pin or removePin, not both.") }
        if let allowance = input.monthlyTokenAllowance, !(0...allowanceMax).contains(allowance) {
            throw AuthError.validation("monthlyTokenAllowance must be from 0 to \(allowanceMax) tokens.")
        }
        if input.monthlyTokenAllowance != nil && input.removeMonthlyTokenAllowance {
            throw AuthError.validation("Give either monthlyTokenAllowance or removeMonthlyTokenAllowance, not both.")
        }
        if input.maxContentRating != nil && input.removeMaxContentRating {
            throw AuthError.validation("Give either maxContentRating or removeMaxContentRating, not both.")
        }
    }

    /// The largest monthly token allowance (the ledger's largest amount).
    public static let allowanceMax: Int64 = 1_000_000_000

    /// One emoji (at most 64 bytes: the longest standard emoji sequences are about 35) or an https URL.
    static func isValidAvatar(_ avatar: String) -> Bool {
        guard avatar.utf8.count <= 512 else { return false }
        if avatar.count == 1, let scalar = avatar.unicodeScalars.first {
            guard avatar.utf8.count <= 64 else { return false }
            return scalar.properties.isEmojiPresentation || (scalar.properties.isEmoji && avatar.unicodeScalars.count > 1)
                || (scalar.properties.isEmoji && scalar.value > 0x2000)
        }
        guard let url = URL(string: avatar), url.scheme == "https", let host = url.host, !host.isEmpty else { return false }
        return true
    }

    static func checkUniqueName(_ name: String, among names: [String]) throws {
        let wanted = trimmed(name).lowercased()
        if names.contains(where: { $0.lowercased() == wanted }) {
            throw AuthError.validation("Another profile of this account already has that name.")
        }
    }

    static func trimmed(_ name: String) -> String { name.trimmingCharacters(in: .whitespacesAndNewlines) }

    /// The database's unique index backs up the in-transaction check (e.g. case folding of other scripts).
    func uniqueNameGuard<T>(_ body: () async throws -> T) async throws -> T {
        do { return try await body() } catch StorageError.uniqueViolation {
            throw AuthError.validation("Another profile of this account already has that name.")
        }
    }

    func load(_ tx: any SQLExecutor, id: String, userID: String) async throws -> FamilyProfile {
        guard let profile = try await store.profile(tx, id: id, userID: userID) else { throw AuthError.notFound }
        return profile
    }

    func audit(_ tx: any SQLExecutor, manager: ProfileManager, owner: Bool, userID: String, action: String, profileID: String, now: Date) async throws
    {
        switch manager {
        case .owner(let session, _):
            try await AuditLog.record(tx, at: now, actor: session.user.id, action: action, subject: userID, ip: nil, detail: profileID)
        case .operatorActor(let actor, let ip):
            try await AuditLog.record(tx, at: now, actor: actor, action: "admin_" + action, subject: userID, ip: ip, detail: profileID)
        }
    }

    func hashPIN(_ pin: String) async throws -> String {
        do { return try await hasher.hash(pin) } catch PasswordHasherError.overloaded { throw AuthError.overloaded }
    }

    func verify(_ secret: String, _ hash: String) async throws -> Bool {
        do { return try await hasher.verify(secret, encoded: hash) } catch PasswordHasherError.overloaded { throw AuthError.overloaded }
    }
}

extension Optional where Wrapped: Sendable {
    func asyncMap<T>(_ transform: (Wrapped) async throws -> T) async rethrows -> T? {
        guard let value = self else { return nil }
        return try await transform(value)
    }
}
