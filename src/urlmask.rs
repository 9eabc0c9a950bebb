//! Passwords in URLs, masked wherever a URL is shown: answers, messages and logs (the audit
//! line of a denial names the object, which may be a URL a caller typed).

/// What a masked password reads as.
pub const MASK: &str = "***";

/// Where the user-info of a URL is: the byte range of `user[:password]` before the `@`.
fn userinfo(text: &str) -> Option<(usize, usize)> {
    let start = text.find("://")? + 3;
    let rest = &text[start..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let at = rest[..authority_end].rfind('@')?;
    Some((start, start + at))
}

/// The password as the `url` crate (and so a browser) reads `text`, where it reads one that
/// the rule above does not find (`https:user:password@host`, without `//`).
fn whatwg_password(text: &str) -> Option<url::Url> {
    url::Url::parse(text).ok().filter(|u| u.password().is_some())
}

/// Whether `text` is a URL with a password in it (`scheme://user:password@host`).
pub fn has_password(text: &str) -> bool {
    userinfo(text).is_some_and(|(start, end)| text[start..end].contains(':'))
        || whatwg_password(text).is_some()
}

/// `text` with the password of its user-info masked (`https://user:***@host/…`); unchanged
/// when it has none. For URLs that go into answers, messages and logs. The user-info is found
/// in the text itself, so that nothing else of it changes, and also in text that the `url`
/// crate would not take as a URL; what only that crate reads as a password is masked in its
/// reading of the URL.
pub fn mask(text: &str) -> String {
    if let Some((start, end)) = userinfo(text)
        && let Some(colon) = text[start..end].find(':')
    {
        return format!("{}:{MASK}{}", &text[..start + colon], &text[end..]);
    }
    if let Some(mut parsed) = whatwg_password(text)
        && parsed.set_password(Some(MASK)).is_ok()
    {
        return parsed.to_string();
    }
    text.to_owned()
}
