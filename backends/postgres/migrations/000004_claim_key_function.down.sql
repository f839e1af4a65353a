-- durable: undo 000004_claim_key_function. Code of a version before 4
-- sends the whole INSERT … ON CONFLICT as ClaimKey's statement and never
-- calls the function.
DROP FUNCTION {schema}.durable_claim_key(timestamptz, float8, text, text, text, text, text, float8, text);
