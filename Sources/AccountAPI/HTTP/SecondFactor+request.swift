import Auth

extension SecondFactor {
    /// The factor a body names with `code` (from the authenticator app) or `recoveryCode`: exactly one of them, or with
    /// `required: false` none (nil).
    static func from(code: String?, recoveryCode: String?, required: Bool) throws -> SecondFactor? {
        switch (code, recoveryCode) {
        case (let code?, nil): return .code(code)
        case (nil, let recovery?): return .recoveryCode(recovery)
        case (nil, nil) where !required: return nil
        default: throw Problem.validation("Send \(required ? "exactly" : "at most") one of 'code' (from the authenticator app) or 'recoveryCode'.")
        }
    }
}
