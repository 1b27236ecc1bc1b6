//! Redis glob patterns for `KEYS` and `SCAN … MATCH` (Redis's
//! `stringmatchlen`): `*` any run, `?` any byte, `[abc]`, `[^a-z]` classes,
//! `\x` a literal `x`. Byte-wise, case-sensitive.

/// Whether `text` matches `pattern`.
pub(crate) fn matches(pattern: &[u8], text: &[u8]) -> bool {
    // Iterative with one backtrack point for the last `*`: linear space,
    // and O(pattern × text) time at worst (no exponential blow-up on
    // patterns like `a*a*a*a*b`, which Redis itself had to fix).
    let (mut p, mut t) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    while p < pattern.len() && pattern[p] == b'*' {
                        p += 1;
                    }
                    if p == pattern.len() {
                        return true;
                    }
                    star = Some((p, t));
                    continue;
                }
                b'?' => {
                    p += 1;
                    t += 1;
                    continue;
                }
                b'[' => {
                    if let Some((matched, next)) = class(pattern, p, text[t]) {
                        if matched {
                            p = next;
                            t += 1;
                            continue;
                        }
                    } else if text[t] == b'[' {
                        // An unterminated class is a literal `[`.
                        p += 1;
                        t += 1;
                        continue;
                    }
                }
                b'\\' if p + 1 < pattern.len() => {
                    if pattern[p + 1] == text[t] {
                        p += 2;
                        t += 1;
                        continue;
                    }
                }
                literal => {
                    if literal == text[t] {
                        p += 1;
                        t += 1;
                        continue;
                    }
                }
            }
        }
        // Mismatch: let the last `*` swallow one more byte, if there is one.
        match star {
            Some((star_p, star_t)) => {
                star = Some((star_p, star_t + 1));
                p = star_p;
                t = star_t + 1;
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&b| b == b'*')
}

/// Matches `byte` against the class starting at `pattern[open] == b'['`.
/// Returns whether it matched and the index after the closing `]`, or
/// `None` if the class is not terminated.
fn class(pattern: &[u8], open: usize, byte: u8) -> Option<(bool, usize)> {
    let mut i = open + 1;
    let negate = pattern.get(i) == Some(&b'^');
    if negate {
        i += 1;
    }
    let mut matched = false;
    loop {
        let &c = pattern.get(i)?;
        match c {
            b']' => break,
            b'\\' => {
                let &escaped = pattern.get(i + 1)?;
                matched |= escaped == byte;
                i += 2;
            }
            _ if pattern.get(i + 1) == Some(&b'-')
                && pattern.get(i + 2).is_some_and(|&e| e != b']') =>
            {
                let (lo, hi) = (c.min(pattern[i + 2]), c.max(pattern[i + 2]));
                matched |= (lo..=hi).contains(&byte);
                i += 3;
            }
            _ => {
                matched |= c == byte;
                i += 1;
            }
        }
    }
    Some((matched != negate, i + 1))
}

/// The literal prefix of `pattern` (before any special character), which
/// bounds the range a `SCAN … MATCH` must visit in the ordered index.
pub(crate) fn literal_prefix(pattern: &[u8]) -> &[u8] {
    let end = pattern
        .iter()
        .position(|b| matches!(b, b'*' | b'?' | b'[' | b'\\'))
        .unwrap_or(pattern.len());
    &pattern[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn matches_like_redis() {
        let yes: &[(&str, &str)] = &[
            ("*", ""),
            ("*", "anything"),
            ("h?llo", "hello"),
            ("h*llo", "heeeello"),
            ("h[ae]llo", "hallo"),
            ("h[^e]llo", "hallo"),
            ("h[a-b]llo", "hbllo"),
            ("h[b-a]llo", "hallo"),
            ("key:*", "key:000000000001"),
            ("a\\*b", "a*b"),
            ("[\\]]", "]"),
            ("a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaab"),
            ("h[llo", "h[llo"),
        ];
        for (p, t) in yes {
            assert!(matches(p.as_bytes(), t.as_bytes()), "{p} should match {t}");
        }
        let no: &[(&str, &str)] = &[
            ("h?llo", "hllo"),
            ("h[^e]llo", "hello"),
            ("h[a-b]llo", "hcllo"),
            ("a\\*b", "axb"),
            ("a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaac"),
            ("abc", "abcd"),
            ("", "a"),
        ];
        for (p, t) in no {
            assert!(
                !matches(p.as_bytes(), t.as_bytes()),
                "{p} should not match {t}"
            );
        }
    }

    #[test]
    fn literal_prefix_stops_at_the_first_special_byte() {
        assert_eq!(literal_prefix(b"user:*:name"), b"user:");
        assert_eq!(literal_prefix(b"plain"), b"plain");
        assert_eq!(literal_prefix(b"a\\*"), b"a");
    }

    proptest! {
        #[test]
        fn a_literal_pattern_matches_only_itself(a in "[a-z]{0,6}", b in "[a-z]{0,6}") {
            prop_assert_eq!(matches(a.as_bytes(), b.as_bytes()), a == b);
        }

        #[test]
        fn star_suffix_is_a_prefix_test(a in "[a-z]{0,4}", b in "[a-z]{0,6}") {
            let pattern = format!("{a}*");
            prop_assert_eq!(matches(pattern.as_bytes(), b.as_bytes()), b.starts_with(&a));
        }

        #[test]
        fn never_panics(p in proptest::collection::vec(any::<u8>(), 0..16), t in proptest::collection::vec(any::<u8>(), 0..16)) {
            let _ = matches(&p, &t);
        }
    }
}
