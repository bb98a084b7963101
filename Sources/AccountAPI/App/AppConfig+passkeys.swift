import Foundation
import WebAuthn

extension AppConfig {
    /// `WEBAUTHN_RP_ID` is a host name this service's sites share (`example.com`); each of `WEBAUTHN_ORIGINS` (comma
    /// separated) is `https://` on it or a subdomain (`http://localhost` for development), or an app origin such as
    /// Android's `android:apk-key-hash:…`. An iOS app with the associated domain `webcredentials:<rp id>` presents
    /// `https://<rp id>`, the default.
    mutating func readPasskeys(_ reader: inout EnvironmentReader) {
        guard let rpID = reader.value("WEBAUTHN_RP_ID")?.lowercased() else { return }
        let hostLabel = /[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?/
        guard rpID.utf8.count <= 253, rpID.split(separator: ".", omittingEmptySubsequences: false).allSatisfy({ $0.wholeMatch(of: hostLabel) != nil })
        else {
            reader.problems.append("WEBAUTHN_RP_ID must be a host name such as example.com (no scheme, port or path)")
            return
        }
        var origins: Set<String> = ["https://" + rpID]
        if let list = reader.value("WEBAUTHN_ORIGINS") {
            origins = Set(list.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty })
            for origin in origins where !Self.originFits(origin, rpID: rpID) {
                reader.problems.append("WEBAUTHN_ORIGINS: '\(origin)' is not https:// on \(rpID) or a subdomain, http://localhost, or an app origin")
            }
        }
        let name = reader.value("WEBAUTHN_RP_NAME") ?? rpID
        guard name.utf8.count <= 64 else {
            reader.problems.append("WEBAUTHN_RP_NAME must be at most 64 bytes")
            return
        }
        relyingParty = RelyingParty(id: rpID, name: name, origins: origins)
    }

    /// WebAuthn lets a page use an rp id that is its host or a suffix of it on a label boundary.
    static func originFits(_ origin: String, rpID: String) -> Bool {
        if origin.hasPrefix("android:apk-key-hash:") { return true }
        guard let url = URL(string: origin), let scheme = url.scheme, let host = url.host?.lowercased(), url.path.isEmpty, url.query == nil,
            url.user == nil
        else { return false }
        if scheme == "http" { return host == "localhost" && rpID == "localhost" }
        return scheme == "https" && (host == rpID || host.hasSuffix("." + rpID))
    }
}
