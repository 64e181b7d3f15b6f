//! Checking what syntax decides: the function's shape and the arguments' values. Types are left
//! to the compiler (see the assertions in `expand`).

use syn::ext::IdentExt;
use syn::{FnArg, GenericArgument, Ident, ItemFn, Pat, PathArguments, ReturnType, Type, TypePath};

use crate::args::{Args, Errors, IntArg};
use crate::duration::parse_millis;
use crate::rate::{self, Rate};

/// Largest `retries` accepted.
const MAX_RETRIES: i128 = 1000;
/// Longest queue name (`job_queue.queue_name` is `VARCHAR(64)`), as `validate_queue_name`.
const MAX_QUEUE_NAME: usize = 64;
/// Longest kind name (`job_queue.kind` is `VARCHAR(128)`).
const MAX_KIND: usize = 128;

/// The retry schedule named by `backoff`.
#[derive(Debug)]
pub(crate) enum Backoff {
    Exponential,
    Linear,
    Fixed,
    /// Milliseconds after the first, second, … failed attempt.
    Schedule(Vec<u64>),
}

/// One job argument: a field of the generated struct.
pub(crate) struct Field {
    pub(crate) ident: Ident,
    pub(crate) ty: Type,
}

/// Everything `expand` needs, all of it checked.
pub(crate) struct Job {
    pub(crate) struct_ident: Ident,
    pub(crate) kind: String,
    pub(crate) queue: String,
    /// `None`: `RetryPolicy::DEFAULT_RETRIES`.
    pub(crate) retries: Option<u32>,
    pub(crate) backoff: Backoff,
    pub(crate) timeout_ms: Option<u64>,
    pub(crate) priority: i16,
    /// The field named by `ordering_key`, spanned on the attribute's token.
    pub(crate) ordering_key: Option<Ident>,
    /// The cron expression of a periodic job.
    pub(crate) cron: Option<String>,
    /// `rate_limit`, checked.
    pub(crate) rate_limit: Option<Rate>,
    /// The field named by `rate_key`, spanned on the attribute's token.
    pub(crate) rate_key: Option<Ident>,
    pub(crate) krate: syn::Path,
    pub(crate) takes_ctx: bool,
    pub(crate) fields: Vec<Field>,
}

/// Checks the function and the arguments. The result is meaningful only when `errors` is empty.
pub(crate) fn job(args: Args, func: &ItemFn, errors: &mut Errors) -> Job {
    let fn_name = func.sig.ident.unraw().to_string();
    let struct_ident = Ident::new(&pascal_case(&fn_name), func.sig.ident.span());

    let kind = match &args.name {
        Some(lit) => {
            let kind = lit.value();
            let bad = kind.chars().any(|c| c.is_whitespace() || c.is_control());
            if kind.is_empty() || kind.chars().count() > MAX_KIND || bad {
                errors.at(lit, format!(
                    "invalid `name` `{kind}`: a kind name is 1 to {MAX_KIND} characters without spaces, e.g. `name = \"send_email\"`"
                ));
            }
            kind
        }
        None => fn_name.clone(),
    };

    let queue = match &args.queue {
        Some(lit) => {
            let queue = lit.value();
            let ok_chars = queue
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'));
            if queue.is_empty() || queue.len() > MAX_QUEUE_NAME || !ok_chars {
                errors.at(lit, format!(
                    "invalid `queue` name `{queue}`: use 1 to {MAX_QUEUE_NAME} characters of letters, digits, `_`, `-`, `.` or `:`, e.g. `queue = \"order-email\"`"
                ));
            }
            queue
        }
        None => "default".to_owned(),
    };

    let retries = args.retries.and_then(|r| match r.value {
        Some(v @ 0..=MAX_RETRIES) => u32::try_from(v).ok(),
        _ => {
            errors.at(&r.expr, format!(
                "`retries` is out of range: use 0 to {MAX_RETRIES} (retries after the first attempt)"
            ));
            None
        }
    });

    let backoff = match &args.backoff {
        None => Backoff::Exponential,
        Some(lit) => match backoff(&lit.value()) {
            Ok(b) => b,
            Err(why) => {
                errors.at(lit, why);
                Backoff::Exponential
            }
        },
    };

    let timeout_ms = args
        .timeout
        .as_ref()
        .and_then(|lit| match parse_millis(&lit.value()) {
            Ok(0) => {
                errors.at(
                    lit,
                    "`timeout` must be longer than zero, e.g. `timeout = \"30s\"`",
                );
                None
            }
            Ok(ms) => Some(ms),
            Err(why) => {
                errors.at(
                    lit,
                    format!(
                        "invalid `timeout` `{}`: {why}; write e.g. `\"30s\"` or `\"1h30m\"`",
                        lit.value()
                    ),
                );
                None
            }
        });

    let priority = args.priority.map_or(0, |p: IntArg| {
        match p.value.and_then(|v| i16::try_from(v).ok()) {
            Some(v) => v,
            None => {
                errors.at(
                    &p.expr,
                    format!(
                        "`priority` is out of range: use {} to {} (lower runs first)",
                        i16::MIN,
                        i16::MAX
                    ),
                );
                0
            }
        }
    });

    check_signature(func, errors);
    let (takes_ctx, fields) = arguments(func, errors);
    check_return(func, errors);

    let ordering_key = args
        .ordering_key
        .as_ref()
        .and_then(|key| field_named("ordering_key", key, &fields, &fn_name, errors));

    let rate_limit = args
        .rate_limit
        .as_ref()
        .and_then(|lit| match rate::parse(&lit.value()) {
            Ok(rate) => Some(rate),
            Err(why) => {
                errors.at(lit, why);
                None
            }
        });
    let rate_key = args.rate_key.as_ref().and_then(|key| {
        if !args.rate_limit_given {
            errors.at(key, "`rate_key` needs `rate_limit`: the key partitions a limit; add e.g. `rate_limit = \"10/s\"`");
        }
        field_named("rate_key", key, &fields, &fn_name, errors)
    });

    let cron = args.cron.as_ref().and_then(|lit| {
        let expr = lit.value();
        let fields_n = expr.split_whitespace().count();
        let full = match fields_n {
            5 => format!("0 {expr}"),
            6 | 7 => expr.clone(),
            _ => {
                errors.at(lit, format!(
                    "invalid `cron` `{expr}`: {fields_n} fields; use 5 (`\"*/5 * * * *\"`: minute hour day month weekday, UTC) or 6 with seconds first"
                ));
                return None;
            }
        };
        if let Err(e) = <cron::Schedule as std::str::FromStr>::from_str(&full) {
            let reason = e.to_string();
            let reason = reason.lines().last().unwrap_or_default().trim().trim_end_matches('.');
            errors.at(lit, format!(
                "invalid `cron` `{expr}`: {reason}; the fields are minute hour day-of-month month day-of-week (UTC)"
            ));
            return None;
        }
        if let Some(first) = fields.first() {
            errors.at(&first.ident, format!(
                "`cron` jobs are enqueued without arguments, but `{fn_name}` takes `{}`; remove the arguments (a `ctx: JobContext` is fine)",
                first.ident.unraw()
            ));
        }
        Some(expr)
    });

    let krate = args.krate.unwrap_or_else(|| syn::parse_quote!(::mysqlq));

    Job {
        struct_ident,
        kind,
        queue,
        retries,
        backoff,
        timeout_ms,
        priority,
        ordering_key,
        cron,
        rate_limit,
        rate_key,
        krate,
        takes_ctx,
        fields,
    }
}

/// The field that `key` (the value of the attribute's `attr`, e.g. `ordering_key`) names, spanned
/// on `key`.
fn field_named(
    attr: &str,
    key: &Ident,
    fields: &[Field],
    fn_name: &str,
    errors: &mut Errors,
) -> Option<Ident> {
    let Some(found) = fields.iter().find(|f| f.ident.unraw() == key.unraw()) else {
        let names: Vec<String> = fields
            .iter()
            .map(|f| format!("`{}`", f.ident.unraw()))
            .collect();
        let expected = if names.is_empty() {
            format!("`{fn_name}` takes no job arguments")
        } else {
            format!("expected one of {}", names.join(", "))
        };
        errors.at(
            key,
            format!("`{attr}` names no argument of `{fn_name}`: there is no `{key}`; {expected}"),
        );
        return None;
    };
    let mut ident = found.ident.clone();
    ident.set_span(key.span());
    Some(ident)
}

fn check_signature(func: &ItemFn, errors: &mut Errors) {
    let sig = &func.sig;
    if sig.asyncness.is_none() {
        errors.at(
            sig.fn_token,
            "`#[job]` functions must be `async`; write `async fn`",
        );
    }
    if let Some(constness) = &sig.constness {
        errors.at(
            constness,
            "`#[job]` functions cannot be `const`; remove `const`",
        );
    }
    if let Some(unsafety) = &sig.unsafety {
        errors.at(unsafety, "`#[job]` functions cannot be `unsafe`; remove `unsafe` and use an `unsafe` block inside");
    }
    if let Some(abi) = &sig.abi {
        errors.at(abi, "`#[job]` functions cannot have an ABI; remove it");
    }
    if !sig.generics.params.is_empty() {
        let lifetimes_only = sig
            .generics
            .params
            .iter()
            .all(|p| matches!(p, syn::GenericParam::Lifetime(_)));
        let message = if lifetimes_only {
            "`#[job]` functions cannot have lifetime parameters: job arguments are stored as JSON and must be owned; remove the lifetimes and take owned types"
        } else {
            "`#[job]` functions cannot be generic: job arguments are stored as JSON and need concrete types; remove the generic parameters"
        };
        errors.at(&sig.generics, message);
    }
    if let Some(clause) = &sig.generics.where_clause {
        errors.at(clause, "`#[job]` functions cannot have a `where` clause: job arguments need concrete types; remove it");
    }
    if let Some(variadic) = &sig.variadic {
        errors.at(variadic, "`#[job]` functions cannot be variadic");
    }
}

/// Whether the function takes the context, and its job arguments.
fn arguments(func: &ItemFn, errors: &mut Errors) -> (bool, Vec<Field>) {
    let mut ctx_seen = false;
    let mut fields = Vec::new();
    for (index, input) in func.sig.inputs.iter().enumerate() {
        let arg = match input {
            FnArg::Receiver(receiver) => {
                errors.at(receiver, "`#[job]` cannot take `self`: a job is a free `async fn`; move it out of the `impl` block");
                continue;
            }
            FnArg::Typed(arg) => arg,
        };
        if is_job_context(&arg.ty) {
            if ctx_seen {
                errors.at(&arg.ty, "`JobContext` is taken twice; remove this argument (clone the first one if you need two)");
            } else if index != 0 {
                errors.at(
                    &arg.ty,
                    "`JobContext` must be the first argument of a `#[job]` function; move it first",
                );
            }
            ctx_seen = true;
            continue;
        }
        check_owned(&arg.ty, errors);
        match &*arg.pat {
            Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => fields.push(Field {
                ident: p.ident.clone(),
                ty: (*arg.ty).clone(),
            }),
            Pat::Wild(wild) => errors.at(wild, "`#[job]` arguments need names (they become the fields of the job struct); name this argument"),
            pat => errors.at(pat, "`#[job]` arguments must be plain names (they become the fields of the job struct); bind the whole value, e.g. `pair: (u8, u8)`, and destructure it in the body"),
        }
    }
    let takes_ctx = func
        .sig
        .inputs
        .first()
        .is_some_and(|a| matches!(a, FnArg::Typed(a) if is_job_context(&a.ty)));
    (takes_ctx, fields)
}

/// `JobContext` by any path: `JobContext`, `mysqlq::JobContext`, `crate::x::JobContext`.
fn is_job_context(ty: &Type) -> bool {
    match ty {
        Type::Path(TypePath { qself: None, path }) => path
            .segments
            .last()
            .is_some_and(|s| s.ident == "JobContext" && s.arguments.is_empty()),
        Type::Paren(p) => is_job_context(&p.elem),
        Type::Group(g) => is_job_context(&g.elem),
        _ => false,
    }
}

/// Rejects borrowed and `impl Trait` types anywhere in an argument's type.
fn check_owned(ty: &Type, errors: &mut Errors) {
    match ty {
        Type::Reference(r) => {
            let owned = match &*r.elem {
                Type::Path(p) if p.qself.is_none() && p.path.is_ident("str") => "String".to_owned(),
                Type::Path(p) if p.qself.is_none() && p.path.is_ident("Path") => "PathBuf".to_owned(),
                Type::Slice(s) => {
                    let elem = &s.elem;
                    format!("Vec<{}>", quote::quote!(#elem))
                }
                elem => quote::quote!(#elem).to_string(),
            };
            errors.at(r, format!(
                "`#[job]` arguments are stored as JSON and cannot borrow; take an owned `{}` instead",
                owned.replace(" <", "<").replace("< ", "<").replace(" >", ">")
            ));
        }
        Type::ImplTrait(t) => errors.at(t, "`#[job]` arguments need concrete types (they are stored as JSON); `impl Trait` is not allowed"),
        Type::Array(a) => check_owned(&a.elem, errors),
        Type::Slice(s) => check_owned(&s.elem, errors),
        Type::Paren(p) => check_owned(&p.elem, errors),
        Type::Group(g) => check_owned(&g.elem, errors),
        Type::Tuple(t) => t.elems.iter().for_each(|t| check_owned(t, errors)),
        Type::Path(p) => {
            if let Some(q) = &p.qself {
                check_owned(&q.ty, errors);
            }
            for segment in &p.path.segments {
                if let PathArguments::AngleBracketed(a) = &segment.arguments {
                    for arg in &a.args {
                        if let GenericArgument::Type(t) = arg {
                            check_owned(t, errors);
                        }
                    }
                }
            }
        }
        _ => {}
    }
}

/// The return type must be `Result<(), E>` (any path ending in `Result`, so aliases such as
/// `anyhow::Result<()>` work).
fn check_return(func: &ItemFn, errors: &mut Errors) {
    let ty = match &func.sig.output {
        ReturnType::Default => {
            errors.at_span(
                func.sig.paren_token.span.close(),
                "`#[job]` functions must return `Result<(), E>`; add `-> Result<(), YourError>` (`E` is `JobError`, `anyhow::Error` or any `std::error::Error`)",
            );
            return;
        }
        ReturnType::Type(_, ty) => ty,
    };
    let message = "`#[job]` functions must return `Result<(), E>` (`E` is `JobError`, `anyhow::Error` or any `std::error::Error`)";
    let Type::Path(TypePath { qself: None, path }) = &**ty else {
        errors.at(ty, message);
        return;
    };
    let Some(last) = path.segments.last().filter(|s| s.ident == "Result") else {
        errors.at(ty, message);
        return;
    };
    let PathArguments::AngleBracketed(generic) = &last.arguments else {
        errors.at(ty, message);
        return;
    };
    match generic.args.first() {
        Some(GenericArgument::Type(Type::Tuple(t))) if t.elems.is_empty() => {}
        Some(GenericArgument::Type(ok)) => errors.at(ok, "a job's output is discarded: `#[job]` functions must return `Result<(), E>`; return `Ok(())` and store results yourself"),
        _ => errors.at(ty, message),
    }
}

/// The generated struct's name: `send_order_email` → `SendOrderEmail`.
fn pascal_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper = true;
    for c in name.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    if out.is_empty() {
        "Job".to_owned()
    } else {
        out
    }
}

/// `"exp"`, `"linear"`, `"fixed"` or a schedule `"5s, 15s, 1m"`.
fn backoff(text: &str) -> Result<Backoff, String> {
    let trimmed = text.trim();
    match trimmed {
        "exp" => return Ok(Backoff::Exponential),
        "linear" => return Ok(Backoff::Linear),
        "fixed" => return Ok(Backoff::Fixed),
        _ => {}
    }
    let hint =
        "expected `\"exp\"`, `\"linear\"`, `\"fixed\"` or a schedule like `\"5s, 15s, 1m, 5m\"`";
    if !trimmed.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(format!("unknown `backoff` `{text}`; {hint}"));
    }
    let mut schedule = Vec::new();
    for entry in trimmed.split(',') {
        match parse_millis(entry) {
            Ok(ms) => schedule.push(ms),
            Err(why) => {
                return Err(format!(
                    "invalid `backoff` schedule entry `{}`: {why}; {hint}",
                    entry.trim()
                ));
            }
        }
    }
    Ok(Backoff::Schedule(schedule))
}

#[cfg(test)]
mod tests {
    use super::{Backoff, backoff, pascal_case};

    #[test]
    fn struct_names() {
        assert_eq!(pascal_case("send_order_email"), "SendOrderEmail");
        assert_eq!(pascal_case("_private_job"), "PrivateJob");
        assert_eq!(pascal_case("job2_run"), "Job2Run");
        assert_eq!(pascal_case("__"), "Job");
    }

    #[test]
    fn backoffs() {
        assert!(matches!(backoff("exp"), Ok(Backoff::Exponential)));
        assert!(matches!(backoff(" fixed "), Ok(Backoff::Fixed)));
        match backoff("5s, 15s, 1m, 5m") {
            Ok(Backoff::Schedule(s)) => assert_eq!(s, [5_000, 15_000, 60_000, 300_000]),
            _ => panic!("a schedule"),
        }
        assert!(
            backoff("exponential")
                .unwrap_err()
                .starts_with("unknown `backoff`")
        );
        assert!(
            backoff("5s,,1m")
                .unwrap_err()
                .contains("entry ``: it is empty")
        );
        let why = backoff("5s, 1x").unwrap_err();
        assert!(why.contains(r#"unknown time unit "x""#), "{why}");
    }
}
