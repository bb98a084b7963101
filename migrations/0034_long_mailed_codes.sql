-- Why: a sign-up or reset mail carries a long code (256 bits) next to the six digits. The six digits can be guessed,
-- so each address has five tries per code and the fifth wrong one burns it; an outside tester who knew only an address
-- kept burning its owner's codes and so kept her from resetting her password. The long code cannot be guessed, is
-- checked against no address's budget and survives the burn. Rows from before have none (they live 10 minutes).
ALTER TABLE otp_codes ADD COLUMN link_hmac TEXT;
ALTER TABLE sign_up_requests ADD COLUMN link_hmac TEXT;
