import Auth
import Clock
import Foundation
import HTTPTypes
import HummingbirdTesting
import Logging
import NIOCore
import Networks
import Storage
import TestSupport
import Testing

@testable import AccountAPI

/// The attacks of the security review, each replayed in process on both engines (scripts/attack replays them against
/// real processes). Parallel requests run in task groups; the test clock stands still, so delays hold throughout.
@Suite("Attacks that must fail")
struct SecurityHTTPTests {
    static let password = "correct horse battery"

    /// Sends `count` requests at once and returns their problem codes ("ok" for a 2xx).
    static func burst(_ count: Int, _ send: @escaping @Sendable (Int) async throws -> TestResponse) async throws -> [String] {
        try await withThrowingTaskGroup(of: String.self) { group in
            for i in 0..<count {
                group.addTask {
                    let response = try await send(i)
                    return response.status.code < 300 ? "ok" : try response.problem().code
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
    }

    @Test(arguments: TestDatabase.engines)
    func parallelWrongSignInsGetNoMoreGuessesThanTheDelaysAllow(engine: Engine) async throws {
        try await TestApp.run(engine, configure: { $0.authPolicy.ipHashesPerMinute = 1000 }) { client, app in
            _ = try await client.signUpAndVerify(app, email: "burst@example.com")
            let codes = try await Self.burst(25) { _ in try await client.signIn("burst@example.com", "wrong password \(UUID())") }
            #expect(codes.filter { $0 == "invalid_credentials" }.count == 5, "4 free failures, the 5th starts the delays: \(codes)")
            #expect(codes.filter { $0 == "rate_limited" }.count == 20)
            // Space the guesses as the delays demand: the tenth failure locks, and the right password then gets nothing.
            var checked = 5
            for _ in 0..<10 {
                app.clock.advance(seconds: 17)
                if try await client.signIn("burst@example.com", "wrong password again").status == .unauthorized { checked += 1 }
            }
            #expect(checked == 10)
            let right = try await client.signIn("burst@example.com", Self.password)
            #expect(right.status == .tooManyRequests)
            #expect(try right.problem().code == "account_locked")
            // Parallel guesses from one network stop at its limit too (50 failures per IP, whatever the addresses).
            let network = try await Self.burst(60) { i in try await client.signIn("nobody\(i)@example.com", "wrong password here") }
            #expect(network.filter { $0 == "invalid_credentials" }.count <= 50 - 10)
            #expect(network.contains("rate_limited"))
        }
    }

    /// Anyone who knows an address can burn its six-digit codes (five wrong guesses; an outside tester kept a victim from
    /// resetting her password that way for as long as he kept going). The long code mailed with them still works, once,
    /// and guessing long codes never burns anything: sign-up and reset alike.
    @Test(arguments: TestDatabase.engines)
    func aBurnedCodeLeavesTheLongCodeWorking(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            func burn(_ path: String, _ body: (String) -> String) async throws {
                for wrong in ["000000", "111111", "222222", "333333", "444444"] { _ = try await client.post(path, json: body(wrong)) }
            }
            func verify(_ code: String) async throws -> TestResponse {
                try await client.post("/api/verify-otp", json: #"{"email":"burnt@example.com","code":"\#(code)"}"#)
            }
            try await client.post("/api/auth/sign-up", json: #"{"email":"burnt@example.com","password":"\#(Self.password)","name":"B"}"#)
            let (short, long) = (try await app.lastCode(to: "burnt@example.com"), try await app.lastLongCode(to: "burnt@example.com"))
            let guessedLong = try await verify(String(repeating: "A", count: 43))
            #expect(try guessedLong.status == .badRequest && guessedLong.problem().code == "invalid_otp")
            try await burn("/api/verify-otp") { #"{"email":"burnt@example.com","code":"\#($0)"}"# }
            let burnt = try await verify(short)
            #expect(try burnt.status == .tooManyRequests && burnt.problem().code == "too_many_attempts")
            let verified = try await verify(long)
            #expect(verified.status == .ok, "\(verified.text)")
            #expect(try await verify(long).status == .conflict, "once (otp_already_used)")
            // The reset the same way.
            app.clock.advance(seconds: 61)
            try await client.post("/api/auth/forgot-password", json: #"{"email":"burnt@example.com"}"#)
            let resetLong = try await app.lastLongCode(to: "burnt@example.com")
            #expect(resetLong != long)
            let reset = #"{"email":"burnt@example.com","code":"%@","newPassword":"a brand new passphrase"}"#
            try await burn("/api/auth/reset-password") { reset.replacingOccurrences(of: "%@", with: $0) }
            let shortAfter = try await client.post(
                "/api/auth/reset-password", json: reset.replacingOccurrences(of: "%@", with: try await app.lastCode(to: "burnt@example.com")))
            #expect(shortAfter.status == .tooManyRequests)
            #expect(try await client.post("/api/auth/reset-password", json: reset.replacingOccurrences(of: "%@", with: resetLong)).status == .ok)
            #expect(try await client.signIn("burnt@example.com", "a brand new passphrase").status == .ok)
            #expect(try await app.mails(to: "burnt@example.com").allSatisfy { !$0.contains("nil") })
        }
    }

    /// A wrong long code answers the same for a verified, a pending and an unknown address, on both routes, and costs
    /// no address its six digits' tries.
    @Test(arguments: TestDatabase.engines)
    func aWrongLongCodeAnswersAlikeForEveryAddress(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            _ = try await client.signUpAndVerify(app, email: "verified@example.com")
            try await client.post("/api/auth/sign-up", json: #"{"email":"pending@example.com","password":"\#(Self.password)","name":"P"}"#)
            let wrong = String(repeating: "Q", count: 43)
            for path in ["/api/verify-otp", "/api/auth/reset-password"] {
                var answers: [String] = []
                for email in ["verified@example.com", "pending@example.com", "nobody@example.com"] {
                    let answer = try await client.post(
                        path, json: #"{"email":"\#(email)","code":" \#(wrong)\n","newPassword":"a brand new passphrase"}"#)
                    answers.append("\(answer.status.code) \(answer.text)")
                }
                #expect(Set(answers).count == 1 && answers[0].hasPrefix("400") && answers[0].contains("invalid_otp"), "\(path): \(answers)")
            }
            let budgets = try await app.rows("SELECT budget_key FROM attempt_budgets WHERE budget_key LIKE 'code:%'")
            #expect(budgets.isEmpty, "no address's code budget was touched")
        }
    }

    /// A right password gives the network's failure budget its attempt back (in a transaction of its own, so the per-IP row
    /// is not held while the session is written): successes never use up a network's allowance of failures.
    @Test(arguments: TestDatabase.engines)
    func successfulSignInsGiveTheNetworkItsAttemptBack(engine: Engine) async throws {
        try await TestApp.run(
            engine,
            configure: {
                $0.authPolicy.ipFailuresToLock = 4; $0.authPolicy.ipHashesPerMinute = 1000
            }
        ) { client, app in
            _ = try await client.signUpAndVerify(app, email: "nat@example.com")
            for i in 0..<2 { #expect(try await client.signIn("stranger\(i)@example.com", "wrong password here").status == .unauthorized) }
            for _ in 0..<8 {
                let answer = try await client.signIn("nat@example.com", Self.password)
                #expect(answer.status == .ok, "\(answer.text)")
            }
            // Two more failures reach the limit of four (the reservation that reaches it sets the lock), the next is refused.
            for _ in 0..<2 { #expect(try await client.signIn("stranger@example.com", "wrong password here").status == .unauthorized) }
            #expect(try await client.signIn("stranger@example.com", "wrong password here").status == .tooManyRequests)
        }
    }

    /// Issue 33 (pre-hijacking): a code activates only what the sign-up it was mailed for asked. Whoever signs up first,
    /// the mailbox owner's own code gives the account her password and name; the attacker's password never works.
    @Test(arguments: TestDatabase.engines)
    func aCodeActivatesOnlyItsOwnSignUp(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let victim = #"{"email":"pending@example.com","password":"the victims passphrase","name":"Victim"}"#
            let attacker = #"{"email":"pending@example.com","password":"the attackers passphrase","name":"Mallory"}"#
            // The attacker first; inside the cooldown the victim's sign-up mails nothing and says so (429, as for every
            // address), so she does not wait for a code that is not hers; it is stored without a code.
            let first = try await client.post("/api/auth/sign-up", json: attacker)
            let attackersCode = try await app.lastCode(to: "pending@example.com")
            let held = try await client.post("/api/auth/sign-up", json: victim)
            #expect(held.status == .tooManyRequests && held.headers[.retryAfter] == "60" && (try? held.problem().code) == "rate_limited")
            #expect(try await app.mails(to: "pending@example.com").count == 1, "the repeat inside the cooldown mails nothing")
            #expect(try await client.signIn("pending@example.com", "the attackers passphrase").status != .ok)
            app.clock.advance(seconds: 61)
            #expect(try await client.post("/api/auth/sign-up", json: victim).text == first.text)
            let victimsCode = try await app.lastCode(to: "pending@example.com")
            #expect(try await app.rows("SELECT id FROM sign_up_requests").count == 3)
            // The pending account holds neither password: only the newest request's answers email_not_verified.
            #expect(try await client.signIn("pending@example.com", "the attackers passphrase").status == .unauthorized)
            let verified = try await client.post("/api/verify-otp", json: #"{"email":"pending@example.com","code":"\#(victimsCode)"}"#)
            #expect(verified.status == .ok)
            #expect(try verified.json(SeedVerifyOTPResponse.self).user?.name == "Victim")
            #expect(try await client.signIn("pending@example.com", "the victims passphrase").status == .ok)
            #expect(try await client.signIn("pending@example.com", "the attackers passphrase").status == .unauthorized)
            // The attacker's code died with the verification (wrong for everyone now).
            let late = try await client.post("/api/verify-otp", json: #"{"email":"pending@example.com","code":"\#(attackersCode)"}"#)
            #expect(late.status == .badRequest)
            #expect(try late.problem().code == "invalid_otp")
            #expect(try await app.rows("SELECT id FROM sign_up_requests WHERE consumed_at_ms IS NULL").isEmpty)
        }
    }

    /// The variant the other way round, and resend: the victim first, the attacker after the cooldown; her own (older)
    /// code still gives her password. resend-otp mints a code only for an address's only sign-up: with two it cannot say
    /// whose the caller is. A sign-up the mail budget holds back is still stored (outside attack: the victim signing up
    /// within the cooldown after the attacker, then resending, once received a code for the attacker's request).
    /// Sign-ups the mail budget holds back are stored without a code; more of them than the cap on requests per
    /// address push out older ones, but never the one whose code was mailed (an outside tester made the owner's
    /// code invalid with ten throttled sign-ups, leaving only the attacker's next code to type).
    @Test(arguments: TestDatabase.engines)
    func heldSignUpsNeverPushOutTheMailedCode(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            try await client.post("/api/auth/sign-up", json: #"{"email":"flood@example.com","password":"the victims passphrase","name":"Victim"}"#)
            let floodCode = try await app.lastCode(to: "flood@example.com")
            for n in 0..<12 {
                app.clock.advance(seconds: 1)  // each newer than the owner's (within the mail's 60 s cooldown)
                let held = try await client.post(
                    "/api/auth/sign-up", json: #"{"email":"flood@example.com","password":"the attackers passphrase \#(n)","name":"Mallory"}"#)
                #expect(held.status == .tooManyRequests)
            }
            #expect(try await app.rows("SELECT id FROM sign_up_requests WHERE email = 'flood@example.com'").count == 10)
            let flooded = try await client.post("/api/verify-otp", json: #"{"email":"flood@example.com","code":"\#(floodCode)"}"#)
            #expect(flooded.status == .ok, "the owner's code after twelve held sign-ups: \(String(buffer: flooded.body))")
            #expect(try flooded.json(SeedVerifyOTPResponse.self).user?.name == "Victim")
        }
    }

    @Test(arguments: TestDatabase.engines)
    func theFirstSignUpsCodeStillWorksAfterAnotherAndResendNeverPicksBetweenSignUps(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            try await client.post("/api/auth/sign-up", json: #"{"email":"first@example.com","password":"the victims passphrase","name":"Victim"}"#)
            let victimsCode = try await app.lastCode(to: "first@example.com")
            app.clock.advance(seconds: 61)
            try await client.post("/api/auth/sign-up", json: #"{"email":"first@example.com","password":"the attackers passphrase","name":"Mallory"}"#)
            app.clock.advance(seconds: 61)
            #expect(try await client.post("/api/auth/resend-otp", json: #"{"email":"first@example.com"}"#).status == .ok)
            let mails = try await app.mails(to: "first@example.com")
            #expect(mails.count == 2 && mails.allSatisfy { $0.contains("finishes the sign-up started at") })
            let started = try #require(
                try await app.rows("SELECT created_at_ms FROM sign_up_requests ORDER BY created_at_ms DESC").first?.date("created_at_ms"))
            #expect(mails[1].contains(String(ISOTime.string(started).prefix(19).replacingOccurrences(of: "T", with: " "))))
            let verified = try await client.post("/api/verify-otp", json: #"{"email":"first@example.com","code":"\#(victimsCode)"}"#)
            #expect(verified.status == .ok)
            #expect(try verified.json(SeedVerifyOTPResponse.self).user?.name == "Victim")
            #expect(try await client.signIn("first@example.com", "the victims passphrase").status == .ok)
            #expect(try await client.signIn("first@example.com", "the attackers passphrase").status == .unauthorized)

            // The attacker first; the victim within the cooldown (no mail, but stored); her resend mints nothing, now or
            // later; her sign-up after the cooldown mails her own code.
            try await client.post("/api/auth/sign-up", json: #"{"email":"held@example.com","password":"the attackers passphrase","name":"Mallory"}"#)
            try await client.post("/api/auth/sign-up", json: #"{"email":"held@example.com","password":"the victims passphrase","name":"Victim"}"#)
            #expect(try await app.mails(to: "held@example.com").count == 1)
            for _ in 0..<2 {
                try await client.post("/api/auth/resend-otp", json: #"{"email":"held@example.com"}"#)
                app.clock.advance(seconds: 61)
            }
            #expect(try await app.mails(to: "held@example.com").count == 1)
            try await client.post("/api/auth/sign-up", json: #"{"email":"held@example.com","password":"the victims passphrase","name":"Victim"}"#)
            let heldCode = try await app.lastCode(to: "held@example.com")
            let held = try await client.post("/api/verify-otp", json: #"{"email":"held@example.com","code":"\#(heldCode)"}"#)
            #expect(try held.json(SeedVerifyOTPResponse.self).user?.name == "Victim")
            #expect(try await client.signIn("held@example.com", "the attackers passphrase").status == .unauthorized)

            // An address's only sign-up: resend mails a fresh code for it.
            try await client.post("/api/auth/sign-up", json: #"{"email":"lost@example.com","password":"the only passphrase","name":"Only"}"#)
            // Sent before the resend's: mails sent together go out in parallel and may share a millisecond (the file's
            // name), so the last one by name would be either (this test failed that way once under load).
            #expect(try await app.mails(to: "lost@example.com").count == 1)
            app.clock.advance(seconds: 61)
            try await client.post("/api/auth/resend-otp", json: #"{"email":"lost@example.com"}"#)
            #expect(try await app.mails(to: "lost@example.com").count == 2)
            let fresh = try await app.lastCode(to: "lost@example.com")
            #expect(try await client.post("/api/verify-otp", json: #"{"email":"lost@example.com","code":"\#(fresh)"}"#).status == .ok)

            // A request older than a day is gone: resend has nothing to renew; a new sign-up starts again.
            try await client.post("/api/auth/sign-up", json: #"{"email":"stale@example.com","password":"forgotten passphrase","name":"Old"}"#)
            app.clock.advance(seconds: 25 * 3600)
            try await client.post("/api/auth/resend-otp", json: #"{"email":"stale@example.com"}"#)
            #expect(try await app.mails(to: "stale@example.com").count == 1)
            app.clock.advance(seconds: 61)
            try await client.post("/api/auth/sign-up", json: #"{"email":"stale@example.com","password":"remembered passphrase","name":"New"}"#)
            let code = try await app.lastCode(to: "stale@example.com")
            #expect(try await client.post("/api/verify-otp", json: #"{"email":"stale@example.com","code":"\#(code)"}"#).status == .ok)
            #expect(try await client.signIn("stale@example.com", "remembered passphrase").status == .ok)
        }
    }

    /// Issue 33 (enumeration by budgets): every unauthenticated endpoint that names an address answers alike (status,
    /// body, Retry-After) and takes the same budgets for a verified, a pending and an unknown address, step by step.
    @Test(arguments: TestDatabase.engines)
    func everyAddressGetsTheSameAnswersAndSpendsTheSameBudgets(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            _ = try await client.signUpAndVerify(app, email: "known@example.com")
            try await client.post("/api/auth/sign-up", json: #"{"email":"pending@example.com","password":"correct horse battery","name":"P"}"#)
            app.clock.advance(seconds: 61)
            func budgets() async throws -> [String: Int] {
                var result: [String: Int] = [:]
                for row in try await app.rows("SELECT budget_key, attempts FROM attempt_budgets") {
                    result[try row.string("budget_key")] = Int(try row.int("attempts"))
                }
                return result
            }
            func wrongCode(_ email: String) async throws -> String {
                try await app.mails(to: email).contains { $0.contains("000000") } ? "111111" : "000000"
            }
            var transcripts: [String: [String]] = [:]
            var spent: [String: [String: Int]] = [:]
            for email in ["known@example.com", "pending@example.com", "nobody@example.com"] {
                let before = try await budgets()
                let code = try await wrongCode(email)
                var lines: [String] = []
                for (path, body) in [
                    ("/api/auth/sign-up", #"{"email":"\#(email)","password":"another long passphrase","name":"Q"}"#),
                    ("/api/auth/resend-otp", #"{"email":"\#(email)"}"#),
                    ("/api/auth/forgot-password", #"{"email":"\#(email)"}"#),
                    ("/api/auth/forgot-password", #"{"email":"\#(email)"}"#),
                    ("/api/auth/sign-in", #"{"email":"\#(email)","password":"not the password"}"#),
                    ("/api/verify-otp", #"{"email":"\#(email)","code":"\#(code)"}"#),
                    ("/api/auth/reset-password", #"{"email":"\#(email)","code":"\#(code)","newPassword":"another long passphrase"}"#),
                ] {
                    let r = try await client.post(path, json: body)
                    lines.append("\(path) \(r.status.code) \(r.headers[.retryAfter] ?? "-") \(r.text)")
                }
                transcripts[email] = lines
                // What each step took, by budget kind (the address's own keys differ only by their keyed hash).
                var delta: [String: Int] = [:]
                for (key, attempts) in try await budgets() where attempts != before[key] {
                    let kind =
                        key.hasPrefix("mail:") || key.hasPrefix("code:") || key.hasPrefix("password:")
                        ? String(key[..<(key.lastIndex(of: ":") ?? key.endIndex)]) : key
                    delta[kind, default: 0] += attempts - (before[key] ?? 0)
                }
                spent[email] = delta
                app.clock.advance(seconds: 61)
            }
            #expect(transcripts["known@example.com"] == transcripts["nobody@example.com"], "\(transcripts)")
            #expect(transcripts["pending@example.com"] == transcripts["nobody@example.com"], "\(transcripts)")
            #expect(spent["known@example.com"] == spent["nobody@example.com"], "\(spent)")
            #expect(spent["pending@example.com"] == spent["nobody@example.com"], "\(spent)")
            #expect(spent["nobody@example.com"]?["mail:verification"] == 1 && spent["nobody@example.com"]?["mail:reset"] == 1)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func parallelPINGuessesStopAtFive(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "pins@example.com", name: "Owner")
            let key = try await app.apiKey(["admin"])
            #expect(try await client.comp(app, userID: try await app.userID(token: token), plan: "pro_monthly", key: key).status == .ok)
            let kid = try await client.createProfile(token, #"{"name":"Kid","pin":"4321","canMakePurchases":false,"canUseCustomContentTypes":false}"#)
            let kidID = try kid.json(ProfileBody.self).id
            let codes = try await Self.burst(20) { i in
                try await client.send(
                    .post, "/api/profiles/select", token: token, json: #"{"profileId":"\#(kidID)","pin":"\#(String(format: "%04d", i))"}"#)
            }
            #expect(codes.filter { $0 == "invalid_pin" }.count <= 5 && codes.filter { $0 == "pin_locked" }.count >= 15, "\(codes)")
            let right = try await client.send(.post, "/api/profiles/select", token: token, json: #"{"profileId":"\#(kidID)","pin":"4321"}"#)
            #expect(right.status == .tooManyRequests)
            #expect(try right.problem().code == "pin_locked")
        }
    }

    @Test(arguments: TestDatabase.engines)
    func wrongCodesAnswerTheSameForEveryAddress(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            _ = try await client.signUpAndVerify(app, email: "verified@example.com")
            try await client.post("/api/auth/sign-up", json: #"{"email":"pending2@example.com","password":"correct horse battery","name":"P"}"#)
            func wrong(_ email: String) async throws -> String {
                let codes = try await app.mails(to: email).compactMap { mail in
                    mail.range(of: #"\d{6}"#, options: .regularExpression).map { String(mail[$0]) }
                }
                return codes.contains("000000") ? "111111" : "000000"
            }
            let addresses = ["verified@example.com", "pending2@example.com", "unknown@example.com"]
            for _ in 0..<6 {
                var answers: [String] = []
                for email in addresses {
                    let guess = try await wrong(email)
                    let r = try await client.post("/api/verify-otp", json: #"{"email":"\#(email)","code":"\#(guess)"}"#)
                    answers.append("\(r.status.code) \(r.text)")
                }
                #expect(Set(answers).count == 1, "\(answers)")
            }
            app.clock.advance(seconds: 61)
            for email in ["verified@example.com", "unknown@example.com"] {
                #expect(try await client.post("/api/auth/forgot-password", json: #"{"email":"\#(email)"}"#).status == .ok)
            }
            for _ in 0..<6 {
                var answers: [String] = []
                for email in ["verified@example.com", "unknown@example.com"] {
                    let guess = try await wrong(email)
                    let r = try await client.post(
                        "/api/auth/reset-password", json: #"{"email":"\#(email)","code":"\#(guess)","newPassword":"another long passphrase"}"#)
                    answers.append("\(r.status.code) \(r.text)")
                }
                #expect(Set(answers).count == 1, "\(answers)")
            }
            // Bogus resets never reach Argon2: the network's hashing budget still holds the two sign-ups of its old window.
            let hashing = try await app.rows("SELECT attempts FROM attempt_budgets WHERE budget_key LIKE 'hash-ip:%'")
            #expect(try hashing.map { try $0.int("attempts") } == [2], "only the sign-ups hashed")
        }
    }

    @Test(arguments: TestDatabase.engines)
    func passwordChecksBehindASessionShareTheSignInBudget(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "stolen@example.com")
            let codes = try await Self.burst(15) { _ in
                try await client.send(
                    .post, "/api/auth/change-password", token: token,
                    json: #"{"currentPassword":"guess guess guess","newPassword":"brand new passphrase"}"#)
            }
            #expect(codes.filter { $0 == "invalid_password" }.count == 5, "\(codes)")
            #expect(codes.filter { $0 == "rate_limited" }.count == 10)
            let erase = try await client.send(.delete, "/api/user/me", token: token, json: #"{"password":"guess guess guess"}"#)
            #expect(erase.status == .tooManyRequests)
            #expect(try await client.signIn("stolen@example.com", Self.password).status == .tooManyRequests, "sign-in waits as well")
        }
    }

    @Test(arguments: TestDatabase.engines)
    func textLimitsCountBytesToo(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let heavyName = String(repeating: "a", count: 99) + "e" + String(repeating: "\u{301}", count: 240_000)
            #expect(heavyName.count == 100)
            let signUp = try await client.post(
                "/api/auth/sign-up", json: #"{"email":"heavy@example.com","password":"correct horse battery","name":"\#(heavyName)"}"#)
            #expect(signUp.status == .badRequest)
            #expect(try signUp.problem().detail.contains("bytes"))
            let heavyPassword = String(repeating: "x" + String(repeating: "\u{301}", count: 40_000), count: 10)
            #expect(heavyPassword.count == 10)
            #expect(
                try await client.post("/api/auth/sign-up", json: #"{"email":"heavy@example.com","password":"\#(heavyPassword)","name":"H"}"#).status
                    == .badRequest)
            #expect(try await client.signIn("heavy@example.com", heavyPassword).status == .badRequest)
            let token = try await client.signUpAndVerify(app, email: "light@example.com")
            #expect(try await client.send(.patch, "/api/user/me", token: token, json: #"{"name":"\#(heavyName)"}"#).status == .badRequest)
            let heavyAvatar = "👍" + String(repeating: "\u{FE0F}", count: 100_000)
            #expect(heavyAvatar.count == 1)
            let profile = try await client.createProfile(
                token, #"{"name":"Kid","avatar":"\#(heavyAvatar)","canMakePurchases":false,"canUseCustomContentTypes":false}"#)
            #expect(profile.status == .badRequest)
            #expect(try await client.get("/api/auth/session", token: token).body.readableBytes < 4096)
            // Real emoji sequences still pass.
            let family = try await client.send(
                .put, "/api/family-profiles/\(try await client.defaultProfileID(token))", token: token,
                json: #"{"name":"Ada","avatar":"👩🏽‍🤝‍👨🏻","canMakePurchases":true,"canUseCustomContentTypes":true}"#)
            #expect(family.status == .ok)
        }
    }

    /// Inputs that once reached a trap (issue 33's audit), each now a clean answer: a billing cursor at Int64's end, a
    /// sortOrder of Int64.min, a number whose Double and Decimal parses both overflow, metadata at Int64's end.
    @Test(arguments: TestDatabase.engines)
    func inputsAtTheEdgesOfTheirTypesAreAnswered(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let key = try await app.apiKey(["admin", "ledger:write"])
            for cursor in ["9223372036854775807.x", "-9223372036854775808.x"] {
                #expect(try await client.get("/api/admin/billing/events?cursor=\(cursor)", token: key).status == .ok)
            }
            let order = try await client.send(.patch, "/api/admin/stickers/any:thing", token: key, json: #"{"sortOrder":-9223372036854775808}"#)
            #expect(order.status == .badRequest)
            let token = try await client.signUpAndVerify(app, email: "edges@example.com")
            let userID = try await app.userID(token: token)
            let huge = "1" + String(repeating: "0", count: 316) + "e-300"
            for amount in [huge, "1e400", "-1e400", "9223372036854775808", "1.5"] {
                let answer = try await client.ledger(
                    "/api/ledger/grants", key: key, idempotencyKey: "edge-\(amount.count)-\(amount.prefix(3))",
                    json: #"{"userId":"\#(userID)","amount":\#(amount),"bucket":"bonus","reason":"edge"}"#)
                #expect(answer.status == .badRequest, "amount \(amount.prefix(20))")
                if amount == huge { #expect(try answer.problem().detail.contains("at most 100 characters")) }
            }
            // The same number in a UTF-16 body (Foundation decodes UTF-16; the scan refuses its zero bytes), on an endpoint
            // every signed-in user reaches.
            let utf16 = try #require((#"{"feature":"x","tokens":"# + huge + "}").data(using: .utf16LittleEndian))
            let check = try await client.execute(
                uri: "/api/entitlements/check", method: .post, headers: [.contentType: "application/json", .authorization: "Bearer \(token)"],
                body: ByteBuffer(bytes: utf16))
            #expect(check.status == .badRequest && (try? check.problem().detail.contains("UTF-8")) == true)
            let grant = try await client.ledger(
                "/api/ledger/grants", key: key, idempotencyKey: "edge-meta",
                json: #"{"userId":"\#(userID)","amount":1,"bucket":"bonus","reason":"edge","metadata":{"n":9223372036854775807.0}}"#)
            #expect(grant.status == .created)
            let operation = try #require(try JSONSerialization.jsonObject(with: Data(grant.text.utf8)) as? [String: Any])["operationId"] as? String
            let stored = try await app.rows("SELECT metadata FROM ledger_transfers WHERE operation_id = ?", [operation ?? ""])
            #expect(stored.first?.optionalString("metadata") == #"{"n":9223372036854775807}"#, "\(stored)")
        }
    }

    @Test(arguments: TestDatabase.engines)
    func aRestrictedProfileCannotManageTheAccount(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let owner = try await client.signUpAndVerify(app, email: "family@example.com", name: "Owner")
            let key = try await app.apiKey(["admin"])
            #expect(try await client.comp(app, userID: try await app.userID(token: owner), plan: "pro_monthly", key: key).status == .ok)
            let kidID = try await client.createProfile(owner, #"{"name":"Kid","canMakePurchases":false,"canUseCustomContentTypes":false}"#)
                .json(ProfileBody.self).id
            let child = try await client.signIn("family@example.com", Self.password).json(SeedSignInResponse.self).session
            #expect(try await client.send(.post, "/api/profiles/select", token: child.token, json: #"{"profileId":"\#(kidID)"}"#).status == .ok)
            struct Current: Decodable { struct Session: Decodable { let id: String }; let session: Session }
            let ownerSessionID = try await client.get("/api/auth/session", token: owner).json(Current.self).session.id
            for (method, path, body) in [
                (HTTPRequest.Method.patch, "/api/user/me", #"{"name":"Pwned"}"#), (.get, "/api/auth/sessions", nil),
                (.delete, "/api/auth/sessions/\(ownerSessionID)", nil), (.get, "/api/user/token-history", nil),
                (.post, "/api/auth/change-password", #"{"currentPassword":"correct horse battery","newPassword":"brand new passphrase"}"#),
                (.delete, "/api/user/me", #"{"password":"correct horse battery"}"#),
                (.post, "/api/family-profiles", #"{"name":"Another","canMakePurchases":true,"canUseCustomContentTypes":true}"#),
            ] {
                let response = try await client.send(method, path, token: child.token, json: body)
                #expect(response.status == .forbidden, "\(method) \(path)")
                #expect(try ["owner_profile_required", "forbidden"].contains(response.problem().code), "\(method) \(path)")
            }
            #expect(try await client.get("/api/auth/session", token: owner).status == .ok, "the owner's session survived")
            for path in ["/api/auth/session", "/api/profiles/available", "/api/entitlements", "/api/user/token-balance", "/api/user/feature-access"] {
                #expect(try await client.get(path, token: child.token).status == .ok, "\(path)")
            }
            #expect(try await client.send(.post, "/api/auth/sign-out", token: child.token).status == .ok, "a profile may sign its own session out")
        }
    }

    @Test(arguments: TestDatabase.engines)
    func mailBudgetsArePerPurpose(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            _ = try await client.signUpAndVerify(app, email: "mail@example.com")
            // Right after the verification mail, a reset code still goes out.
            #expect(try await client.post("/api/auth/forgot-password", json: #"{"email":"mail@example.com"}"#).status == .ok)
            #expect(try await app.mails(to: "mail@example.com").last?.contains("password reset code") == true)
            // Spending the verification budget does not starve resets, and a throttled answer is the same for every address.
            for _ in 0..<6 {
                app.clock.advance(seconds: 61)
                try await client.post("/api/auth/resend-otp", json: #"{"email":"mail@example.com"}"#)
            }
            let before = try await app.mails(to: "mail@example.com").count
            #expect(try await client.post("/api/auth/forgot-password", json: #"{"email":"mail@example.com"}"#).status == .ok)
            #expect(try await app.mails(to: "mail@example.com").count == before + 1)
            let known = try await client.post("/api/auth/forgot-password", json: #"{"email":"mail@example.com"}"#)
            try await client.post("/api/auth/forgot-password", json: #"{"email":"ghost@example.com"}"#)
            let unknown = try await client.post("/api/auth/forgot-password", json: #"{"email":"ghost@example.com"}"#)
            #expect(known.status == .tooManyRequests && known.text == unknown.text && known.headers[.retryAfter] == unknown.headers[.retryAfter])
        }
    }

    @Test(arguments: TestDatabase.engines)
    func responsesCarryTheirSecurityHeaders(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "headers@example.com")
            for path in ["/api/auth/session", "/api/user/me", "/api/auth/sessions", "/api/entitlements", "/api/nope"] {
                let response = try await client.get(path, token: token)
                #expect(response.headers[.cacheControl] == "no-store", "\(path)")
                #expect(response.headers[.xContentTypeOptions] == "nosniff", "\(path)")
            }
            let signIn = try await client.signIn("headers@example.com", Self.password)
            #expect(signIn.headers[.cacheControl] == "no-store")
            #expect(try await client.get("/api/subscription-plans", token: nil).headers[.cacheControl] == "public, max-age=300")
            let wrongMethod = try await client.send(.delete, "/api/auth/sign-in", token: nil)
            #expect(wrongMethod.status == .methodNotAllowed)
            #expect(wrongMethod.headers[.allow] == "POST")
            #expect(try wrongMethod.problem().code == "method_not_allowed")
            let me = try await client.send(.put, "/api/user/me", token: token)
            #expect(me.status == .methodNotAllowed && me.headers[.allow] == "DELETE, GET, PATCH")
            let withParameter = try await client.send(.get, "/api/auth/sessions/abc", token: token)
            #expect(withParameter.status == .methodNotAllowed && withParameter.headers[.allow] == "DELETE")
            #expect(try await client.get("/api/auth/nothing-here", token: nil).status == .notFound)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func metricsAreOffWithoutAToken(engine: Engine) async throws {
        try await TestApp.run(engine, configure: { $0.metricsToken = nil }) { client, _ in
            let metrics = try await client.get("/metrics", token: nil)
            #expect(metrics.status == .notFound)
        }
    }
}

@Suite("Client address behind proxies")
struct TrustedProxiesTests {
    @Test func onlyTrustedHopsMayNameTheClient() throws {
        let none = TrustedProxies.none
        #expect(none.clientIP(peer: "10.0.0.5", forwardedFor: ["1.2.3.4"]) == "10.0.0.5")
        let proxies = try TrustedProxies.parse("10.0.0.0/8, 127.0.0.1/32, ::1/128").get()
        #expect(proxies.clientIP(peer: "203.0.113.9", forwardedFor: ["1.2.3.4"]) == "203.0.113.9", "an untrusted peer is the client")
        #expect(proxies.clientIP(peer: "10.1.2.3", forwardedFor: ["203.0.113.7"]) == "203.0.113.7")
        #expect(proxies.clientIP(peer: "10.1.2.3", forwardedFor: ["6.6.6.6, 203.0.113.7"]) == "203.0.113.7", "the spoofed left part is ignored")
        #expect(proxies.clientIP(peer: "10.1.2.3", forwardedFor: ["6.6.6.6", "203.0.113.7, 10.9.9.9"]) == "203.0.113.7", "trusted hops are skipped")
        #expect(proxies.clientIP(peer: "10.1.2.3", forwardedFor: ["garbage"]) == "10.1.2.3")
        #expect(proxies.clientIP(peer: "10.1.2.3", forwardedFor: []) == "10.1.2.3")
        #expect(proxies.clientIP(peer: "::1", forwardedFor: ["2001:db8::1"]) == "2001:db8::1")
        #expect(proxies.clientIP(peer: "::ffff:127.0.0.1", forwardedFor: ["198.51.100.1"]) == "198.51.100.1", "IPv4-mapped peers")
        #expect(throws: Never.self) { try TrustedProxies.parse("").get() }
        if case .failure(let invalid) = TrustedProxies.parse("10.0.0.0/8, nonsense") {
            #expect(invalid.entry == "nonsense")
        } else {
            Issue.record("accepted nonsense")
        }
        #expect(IPNetwork("10.0.0.0/33") == nil && IPNetwork("::/129") == nil && IPNetwork("10.0.0.0/0")?.contains([1, 2, 3, 4]) == true)
    }
}

@Suite("Ledger edges found by the security review")
struct LedgerEdgeTests {
    @Test(arguments: TestDatabase.engines)
    func metadataNumbersAreExactAndErasedUsersCannotBeCharged(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "edges@example.com")
            let user = try await app.userID(token: token)
            let key = try await app.apiKey(["ledger:write", "admin"])
            let exact =
                #"{"userId":"\#(user)","amount":5,"bucket":"purchased","metadata":{"n":9007199254740993,"big":123456789012345678901234567890,"f":0.1,"one":1.0}}"#
            #expect(try await client.ledger("/api/ledger/grants", key: key, idempotencyKey: "exact", json: exact).status == .created)
            let history = try await client.get("/api/admin/users/\(user)/token-history", token: key).text
            #expect(history.contains(#""n":9007199254740993"#) && history.contains("123456789012345678901234567890"), "\(history)")
            #expect(history.contains(#""f":0.1"#) && history.contains(#""one":1"#))
            let nearby = exact.replacingOccurrences(of: "9007199254740993", with: "9007199254740992")
            let conflict = try await client.ledger("/api/ledger/grants", key: key, idempotencyKey: "exact", json: nearby)
            #expect(conflict.status == .conflict)
            #expect(try conflict.problem().code == "idempotency_conflict")
            // Erasure forfeits the balance; afterwards every write for the user is a 404, on every spend path.
            let hold = try await client.ledger(
                "/api/ledger/holds", key: key, idempotencyKey: "h", json: #"{"userId":"\#(user)","amount":2,"reason":"job"}"#)
            #expect(hold.status == .created)
            #expect(try await client.send(.delete, "/api/user/me", token: token, json: #"{"password":"correct horse battery"}"#).status == .noContent)
            for (path, body) in [
                ("/api/ledger/spend", #"{"userId":"\#(user)","amount":1,"reason":"x"}"#),
                ("/api/ledger/holds", #"{"userId":"\#(user)","amount":1,"reason":"x"}"#),
                ("/api/ledger/grants", #"{"userId":"\#(user)","amount":1,"bucket":"bonus"}"#),
            ] {
                let response = try await client.ledger(path, key: key, idempotencyKey: "after-\(path)", json: body)
                #expect(response.status == .notFound, "\(path): \(response.text)")
            }
            struct Hold: Decodable { let id: String }
            let holdID = try hold.json(Hold.self).id
            let capture = try await client.ledger("/api/ledger/holds/\(holdID)/capture", key: key, idempotencyKey: "c", json: nil)
            #expect(capture.status == .conflict, "the erasure voided the hold")
            let verify = try await client.get("/api/admin/ledger/verify", token: key)
            #expect(verify.text.contains(#""ok":true"#))
        }
    }
}
