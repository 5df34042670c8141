//! `cargo run -p xtask -- parity <CANN dir>`: checks our ACL headers against CANN's real ones.
//!
//! Everything is generated from *our* headers (bindgen's view of them, plus the text of their
//! `#define`s), so a declaration another engineer adds is checked without touching this file:
//!
//! 1. a C++ translation unit of `static_assert`s — every prototype (`decltype(&fn)`), typedef,
//!    enum (an enum, its size, each enumerator's value and type), struct and union (kind, size,
//!    alignment, each field's offset and type, an anonymous member's fields as the record's
//!    own), constant and integer macro (value and type) — is
//!    compiled with g++ first against our headers (which proves the generator right) and then
//!    against CANN's;
//! 2. the set of names either compilation reports as deprecated must be the same;
//! 3. each of our header files must declare, counting what it includes, exactly the names
//!    CANN's file of the same name declares: every function, type, enumerator and integer macro,
//!    so a program that includes only one header compiles against both sets or neither, and a
//!    name CANN declares that we never added (a type or macro no function of ours takes) is a
//!    failure, not a gap the other checks, generated from our headers, cannot see;
//! 4. the C++-only headers (inline overloads of the C functions, which a `decltype(&fn)` of an
//!    overloaded name cannot check) must define the same overloads as CANN's, compared as
//!    signatures: template heads, return types, names, parameters and default arguments.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{CONSTS, ENTRY_HEADERS, PROJECT_INCLUDE, item_names, run_bindgen, workspace_root};

/// Helpers the checks are written with: declarator syntax (arrays, function pointers) would
/// otherwise have to be rebuilt around each name.
const PRELUDE: &str = "\
#include <cstddef>
#include <type_traits>

namespace parity {
template <class T, std::size_t N> using array = T[N];
template <class R, class... A> using fnptr = R (*)(A...);
template <class R, class... A> using variadic_fnptr = R (*)(A..., ...);
}
";

pub(crate) fn parity_command(cann: &Path) -> Result<(), String> {
    let root = workspace_root();
    let ours = root.join(PROJECT_INCLUDE);
    let theirs = cann.join("include");
    if !theirs.join("acl").is_dir() {
        return Err(format!("no CANN headers under {}", theirs.display()));
    }
    let headers = header_files(&ours)?;
    let (source, count) = write_checks(&root, &ours, &headers, "acl_parity.cpp")?;
    println!("{count} checks generated in {}", source.display());

    let deprecated_ours = compile(&source, &ours).map_err(|e| {
        format!("the checks do not hold for our own headers (a generator bug):\n{e}")
    })?;
    let deprecated_theirs =
        compile(&source, &theirs).map_err(|e| format!("our headers differ from CANN's:\n{e}"))?;
    println!("every check holds against {}", theirs.display());
    if deprecated_ours != deprecated_theirs {
        return Err(format!(
            "deprecation markers differ: only ours deprecate {:?}; only CANN's deprecate {:?}",
            deprecated_ours
                .difference(&deprecated_theirs)
                .collect::<Vec<_>>(),
            deprecated_theirs
                .difference(&deprecated_ours)
                .collect::<Vec<_>>()
        ));
    }
    println!("the same {} names are deprecated", deprecated_ours.len());

    placement(&ours, &theirs, &headers)?;
    println!("every header declares the same names as CANN's");

    for header in CXX_ONLY_HEADERS {
        let read = |dir: &Path| {
            let path = dir.join(header);
            fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))
        };
        let (ours, theirs) = (
            inline_signatures(&read(&ours)?),
            inline_signatures(&read(&theirs)?),
        );
        if ours != theirs {
            return Err(format!(
                "{header}: only ours define {:?}; only CANN's define {:?}",
                ours.difference(&theirs).collect::<Vec<_>>(),
                theirs.difference(&ours).collect::<Vec<_>>()
            ));
        }
        println!("{header} defines the same {} overloads", ours.len());
    }
    Ok(())
}

/// Headers that add only C++ inline overloads of the C functions. Left out of the prototype
/// checks, whose `decltype(&fn)` cannot name one overload of several, and compared by
/// [`inline_signatures`] instead.
const CXX_ONLY_HEADERS: [&str; 1] = ["acl/acl_rt_api.h"];

/// The signature of every `static inline` function a header defines, with its template head,
/// comments removed and spacing normalised: what a caller's overload resolution sees.
fn inline_signatures(text: &str) -> BTreeSet<String> {
    let code = without_comments(text);
    let mut found = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("static inline") {
        let head = rest[..at].trim_end();
        let template = head
            .rfind("template")
            .filter(|&t| head[t..].ends_with('>') && !head[t..].contains(';'))
            .map_or("", |t| &head[t..]);
        let body = rest[at..].find('{').map_or(rest.len(), |b| at + b);
        found.insert(normalised(&format!("{template} {}", &rest[at..body])));
        rest = &rest[body..];
        // Skip the body: overloads are not nested, so the first closing brace at depth 0 ends it.
        let mut depth = 0usize;
        let end = rest
            .char_indices()
            .find(|&(_, c)| {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                depth == 0
            })
            .map_or(rest.len(), |(i, _)| i + 1);
        rest = &rest[end..];
    }
    found
}

/// `text` without `//` and `/* */` comments.
fn without_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("/*").into_iter().chain(rest.find("//")).min() {
        out.push_str(&rest[..start]);
        let end = match rest[start..].starts_with("/*") {
            true => rest[start..]
                .find("*/")
                .map_or(rest.len(), |e| start + e + 2),
            false => rest[start..].find('\n').map_or(rest.len(), |e| start + e),
        };
        out.push(' ');
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// One space between words, none around punctuation.
fn normalised(signature: &str) -> String {
    let spaced = signature.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = String::with_capacity(spaced.len());
    let chars: Vec<char> = spaced.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        let punct = |c: char| "()<>,*&=:".contains(c);
        if c == ' '
            && (i == 0 || punct(chars[i - 1]) || chars.get(i + 1).copied().is_some_and(punct))
        {
            continue;
        }
        out.push(c);
    }
    out.trim().to_owned()
}

/// Generates the checks of our headers into `<target>/parity/<name>`; returns its path and how
/// many checks it holds.
fn write_checks(
    root: &Path,
    ours: &Path,
    headers: &[String],
    name: &str,
) -> Result<(PathBuf, usize), String> {
    let file = run_bindgen(
        ours,
        ENTRY_HEADERS,
        None,
        bindgen::EnumVariation::ModuleConsts,
    )?;
    let macros = integer_macros(ours, headers)?;
    let (checks, count) = checks(&file, &macros)?;
    let mut unit = String::from(PRELUDE);
    for header in headers
        .iter()
        .filter(|h| !CXX_ONLY_HEADERS.contains(&h.as_str()))
    {
        writeln!(unit, "#include \"{header}\"").expect("writing to a String");
    }
    unit.push_str(&checks);
    let dir = target_dir(root).join("parity");
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let source = dir.join(name);
    fs::write(&source, unit).map_err(|e| format!("cannot write {}: {e}", source.display()))?;
    Ok((source, count))
}

/// Every header file under `include/acl`, as the path a program includes (`acl/acl_rt.h`).
fn header_files(include: &Path) -> Result<Vec<String>, String> {
    let mut found = Vec::new();
    let mut pending = vec![include.join("acl")];
    while let Some(dir) = pending.pop() {
        let entries =
            fs::read_dir(&dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
        for entry in entries {
            let path = entry.map_err(|e| format!("{}: {e}", dir.display()))?.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "h") {
                let relative = path.strip_prefix(include).expect("listed under include");
                found.push(relative.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    found.sort();
    Ok(found)
}

/// `#define NAME <integer literal>` in our headers, with the literal as written: its suffix is
/// its type, which bindgen does not report.
fn integer_macros(include: &Path, headers: &[String]) -> Result<BTreeMap<String, String>, String> {
    let mut macros = BTreeMap::new();
    for header in headers {
        let path = include.join(header);
        let text = fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        for line in text.lines() {
            let Some(rest) = line.trim_start().strip_prefix("#define ") else {
                continue;
            };
            let mut parts = rest.split_whitespace();
            let (Some(name), Some(value)) = (parts.next(), parts.next()) else {
                continue;
            };
            if let Some(literal) = integer_literal(value).filter(|_| !name.contains('(')) {
                macros.insert(name.to_string(), literal.to_string());
            }
        }
    }
    Ok(macros)
}

/// The integer literal a macro's value is, if it is one; CANN writes some in parentheses,
/// `(0X2U)`, which is the same literal.
fn integer_literal(value: &str) -> Option<&str> {
    let literal = value
        .strip_prefix('(')
        .and_then(|inner| inner.strip_suffix(')'))
        .unwrap_or(value);
    is_integer_literal(literal).then_some(literal)
}

fn is_integer_literal(text: &str) -> bool {
    let digits = text.trim_end_matches(['u', 'U', 'l', 'L']);
    let (digits, radix) = match digits.strip_prefix("0x").or(digits.strip_prefix("0X")) {
        Some(hex) => (hex, 16),
        None => (digits, 10),
    };
    !digits.is_empty() && digits.chars().all(|c| c.is_digit(radix))
}

/// The `static_assert`s for every item of `file`, and how many there are.
fn checks(file: &syn::File, macros: &BTreeMap<String, String>) -> Result<(String, usize), String> {
    let layouts = layouts(file);
    let (records, members) = (records(file), anonymous_members(file));
    let mut out = Checks::default();
    for (name, value) in macros {
        out.add(
            format!(
                "std::is_same<decltype({name}), decltype({value})>::value && {name} == {value}"
            ),
            format!("macro {name}"),
        );
    }
    for item in &file.items {
        match item {
            syn::Item::ForeignMod(block) => {
                for f in &block.items {
                    let syn::ForeignItem::Fn(f) = f else {
                        return Err("unexpected non-function item in an extern block".into());
                    };
                    let name = &f.sig.ident;
                    out.add(
                        format!(
                            "std::is_same<decltype(&{name}), {}>::value",
                            function_type(&f.sig)?
                        ),
                        format!("prototype of {name}"),
                    );
                }
            }
            syn::Item::Type(alias) => {
                let name = &alias.ident;
                out.add(
                    format!("std::is_same<{name}, {}>::value", cxx(&alias.ty)?),
                    format!("typedef {name}"),
                );
            }
            syn::Item::Mod(module) => enum_checks(module, &mut out)?,
            // `const _` items are bindgen's layout tests, read by `layouts`.
            syn::Item::Const(constant)
                if constant.ident != "_" && !macros.contains_key(&constant.ident.to_string()) =>
            {
                let name = &constant.ident;
                let value = tokens(&constant.expr);
                out.add(
                    format!(
                        "std::is_same<decltype({name}), const {}>::value && {name} == {value}",
                        cxx(&constant.ty)?
                    ),
                    format!("constant {name}"),
                );
            }
            syn::Item::Struct(s) if !members.contains(&s.ident.to_string()) => {
                let fields = s.fields.iter().map(|f| (f.ident.as_ref(), &f.ty));
                let fields = flattened(&s.ident.to_string(), fields, &records, &layouts)?;
                record_checks(&s.ident, "class", fields, &layouts, &mut out)?;
            }
            syn::Item::Union(u) if !members.contains(&u.ident.to_string()) => {
                let fields = u.fields.named.iter().map(|f| (f.ident.as_ref(), &f.ty));
                let fields = flattened(&u.ident.to_string(), fields, &records, &layouts)?;
                record_checks(&u.ident, "union", fields, &layouts, &mut out)?;
            }
            _ => {}
        }
    }
    Ok((spell_anonymous(file, out.text), out.count))
}

/// A field as the checks see it: its name, type and offset (`None`: opaque, or unnamed).
type Field<'a> = (Option<String>, &'a syn::Type, usize);

/// bindgen's name for an anonymous member (a struct or union without a member name, whose
/// members C names as the enclosing record's own).
const ANONYMOUS_MEMBER: &str = "__bindgen_anon_";

/// Every struct and union of `file` by name, with its fields.
fn records(file: &syn::File) -> BTreeMap<String, Vec<(Option<&syn::Ident>, &syn::Type)>> {
    let mut records = BTreeMap::new();
    for item in &file.items {
        let (name, fields): (_, Vec<_>) = match item {
            syn::Item::Struct(s) => (
                &s.ident,
                s.fields.iter().map(|f| (f.ident.as_ref(), &f.ty)).collect(),
            ),
            syn::Item::Union(u) => (
                &u.ident,
                u.fields
                    .named
                    .iter()
                    .map(|f| (f.ident.as_ref(), &f.ty))
                    .collect(),
            ),
            _ => continue,
        };
        records.insert(name.to_string(), fields);
    }
    records
}

/// The types of anonymous members: they have no name C++ can spell, so their fields are
/// checked as their enclosing record's ([`flattened`]).
fn anonymous_members(file: &syn::File) -> BTreeSet<String> {
    anonymous_fields(file)
        .into_iter()
        .filter(|(_, field, _)| field.starts_with(ANONYMOUS_MEMBER))
        .map(|(_, _, anonymous)| anonymous)
        .collect()
}

/// A record's fields with their offsets, the fields of its anonymous members among them (at
/// the member's offset plus their own), as C names and places them. An opaque record's
/// fields (bindgen's `_unused`) and unnamed ones come out unnamed.
fn flattened<'a>(
    record: &str,
    fields: impl Iterator<Item = (Option<&'a syn::Ident>, &'a syn::Type)>,
    records: &BTreeMap<String, Vec<(Option<&'a syn::Ident>, &'a syn::Type)>>,
    layouts: &BTreeMap<String, usize>,
) -> Result<Vec<Field<'a>>, String> {
    let layout = |what: String| {
        layouts
            .get(&what)
            .copied()
            .ok_or_else(|| format!("bindgen gave no {what}"))
    };
    let fields: Vec<_> = fields.collect();
    let mut out = Vec::new();
    for (at, &(field, ty)) in fields.iter().enumerate() {
        let name = field.map(ToString::to_string);
        let anonymous = name
            .as_ref()
            .is_some_and(|n| n.starts_with(ANONYMOUS_MEMBER));
        let Some(name) = name.filter(|n| anonymous || !n.starts_with('_')) else {
            out.push((None, ty, 0));
            continue;
        };
        if !anonymous {
            let offset = layout(format!("Offset of field: {record}::{name}"))?;
            out.push((Some(name), ty, offset));
            continue;
        }
        // bindgen gives no offset for an anonymous member; as the last member, with no tail
        // padding after it, it ends where the record does.
        let member = tokens(ty);
        let size = layout(format!("Size of {member}"))?;
        let total = layout(format!("Size of {record}"))?;
        let align = layout(format!("Alignment of {record}"))?;
        if at + 1 != fields.len() || size % align != 0 || size > total {
            return Err(format!(
                "cannot place the anonymous member {record}::{name}: only a last one whose size \
                 is a multiple of the record's alignment is placed"
            ));
        }
        let inner = records
            .get(&member)
            .ok_or_else(|| format!("no record {member} for {record}::{name}"))?;
        for (inner_name, inner_ty, inner_offset) in
            flattened(&member, inner.iter().copied(), records, layouts)?
        {
            out.push((inner_name, inner_ty, total - size + inner_offset));
        }
    }
    Ok(out)
}

/// Fields whose type is an anonymous struct or union: (record, field, bindgen's name for the
/// type, `Outer__bindgen_ty_N`).
fn anonymous_fields(file: &syn::File) -> Vec<(String, String, String)> {
    let mut found = Vec::new();
    let mut note = |record: &syn::Ident, field: Option<&syn::Ident>, ty: &syn::Type| {
        if let (Some(field), syn::Type::Path(path)) = (field, ty)
            && let Some(last) = path.path.segments.last()
            && last.ident.to_string().contains("__bindgen_ty_")
        {
            found.push((
                record.to_string(),
                field.to_string(),
                last.ident.to_string(),
            ));
        }
    };
    for item in &file.items {
        match item {
            syn::Item::Struct(s) => s
                .fields
                .iter()
                .for_each(|f| note(&s.ident, f.ident.as_ref(), &f.ty)),
            syn::Item::Union(u) => u
                .fields
                .named
                .iter()
                .for_each(|f| note(&u.ident, f.ident.as_ref(), &f.ty)),
            _ => {}
        }
    }
    found
}

/// Rewrites bindgen's names for anonymous structs and unions in the checks as C++ names them:
/// `decltype(Outer::field)`, nested as deep as they are.
fn spell_anonymous(file: &syn::File, mut text: String) -> String {
    let fields = anonymous_fields(file);
    let mut spelling: BTreeMap<String, String> = BTreeMap::new();
    // An inner anonymous type is spelled through its outer one, which may itself be anonymous.
    while spelling.len() < fields.len() {
        let before = spelling.len();
        for (record, field, anonymous) in &fields {
            let outer = match record.contains("__bindgen_ty_") {
                true => spelling.get(record).cloned(),
                false => Some(record.clone()),
            };
            if let Some(outer) = outer {
                spelling
                    .entry(anonymous.clone())
                    .or_insert_with(|| format!("decltype({outer}::{field})"));
            }
        }
        if spelling.len() == before {
            break;
        }
    }
    // Longest first, so that `X__bindgen_ty_1` does not rewrite part of `X__bindgen_ty_10`.
    let mut names: Vec<_> = spelling.into_iter().collect();
    names.sort_by_key(|(name, _)| std::cmp::Reverse(name.len()));
    for (name, spelled) in names {
        text = text.replace(&name, &spelled);
    }
    text
}

#[derive(Default)]
struct Checks {
    text: String,
    count: usize,
}

impl Checks {
    fn add(&mut self, condition: String, what: String) {
        writeln!(self.text, "static_assert({condition}, \"{what}\");")
            .expect("writing to a String");
        self.count += 1;
    }
}

/// An enum rendered as a module: `pub mod E { pub type Type = ...; pub const X: Type = ...; }`.
fn enum_checks(module: &syn::ItemMod, out: &mut Checks) -> Result<(), String> {
    let name = &module.ident;
    let Some((_, items)) = &module.content else {
        return Ok(());
    };
    for item in items {
        match item {
            syn::Item::Type(repr) => {
                out.add(
                    format!("std::is_enum<{name}>::value"),
                    format!("{name} is an enum"),
                );
                out.add(
                    format!("sizeof({name}) == sizeof({})", cxx(&repr.ty)?),
                    format!("size of enum {name}"),
                );
            }
            syn::Item::Const(variant) => {
                let variant_name = &variant.ident;
                let value = tokens(&variant.expr);
                out.add(
                    format!(
                        "std::is_same<decltype({variant_name}), {name}>::value && \
                         {variant_name} == {value}"
                    ),
                    format!("enumerator {name}::{variant_name}"),
                );
            }
            _ => {}
        }
    }
    Ok(())
}

/// A struct or union: its kind, size and alignment, and each field's offset and type. Opaque
/// types (bindgen gives them a `_unused` field) have no layout to compare.
fn record_checks(
    name: &syn::Ident,
    kind: &str,
    fields: Vec<Field<'_>>,
    layouts: &BTreeMap<String, usize>,
    out: &mut Checks,
) -> Result<(), String> {
    if fields.iter().any(|(f, _, _)| f.is_none()) {
        return Ok(());
    }
    out.add(
        format!("std::is_{kind}<{name}>::value"),
        format!("{name} is a {kind}"),
    );
    for (what, expression) in [("Size", "sizeof"), ("Alignment", "alignof")] {
        let value = layouts
            .get(&format!("{what} of {name}"))
            .ok_or_else(|| format!("bindgen gave no {what} for {name}"))?;
        out.add(
            format!("{expression}({name}) == {value}"),
            format!("{expression}({name})"),
        );
    }
    for (field, ty, offset) in fields {
        let rust_name = field.expect("checked above");
        let field = c_name(&rust_name);
        out.add(
            format!("offsetof({name}, {field}) == {offset}"),
            format!("offsetof({name}, {field})"),
        );
        out.add(
            format!(
                "std::is_same<decltype({name}::{field}), {}>::value",
                cxx(ty)?
            ),
            format!("type of {name}::{field}"),
        );
    }
    Ok(())
}

/// The C name of a field: bindgen appends `_` to names that are Rust keywords.
fn c_name(rust: &str) -> &str {
    const KEYWORDS: &[&str] = &[
        "as", "box", "break", "const", "crate", "dyn", "enum", "fn", "impl", "in", "loop", "match",
        "mod", "move", "mut", "pub", "ref", "self", "static", "super", "trait", "type", "use",
        "where",
    ];
    rust.strip_suffix('_')
        .filter(|stem| KEYWORDS.contains(stem))
        .unwrap_or(rust)
}

/// Sizes, alignments and offsets from bindgen's layout tests, keyed by their labels
/// (`Size of T`, `Alignment of T`, `Offset of field: T::f`). Each test reads
/// `["label"][<expression> - <value>usize];`.
fn layouts(file: &syn::File) -> BTreeMap<String, usize> {
    let mut layouts = BTreeMap::new();
    for item in &file.items {
        let syn::Item::Const(test) = item else {
            continue;
        };
        let text = tokens(&test.expr);
        let mut rest = text.as_str();
        while let Some(start) = rest.find("[\"") {
            rest = &rest[start + 2..];
            let Some(end) = rest.find("\"]") else { break };
            let label = rest[..end].to_string();
            rest = &rest[end..];
            let Some(usize_at) = rest.find("usize") else {
                break;
            };
            let digits = rest[..usize_at].trim_end();
            let number: String = digits
                .chars()
                .rev()
                .take_while(char::is_ascii_digit)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            if let Ok(value) = number.parse() {
                layouts.insert(label, value);
            }
            rest = &rest[usize_at..];
        }
    }
    layouts
}

fn tokens(expr: &impl quote::ToTokens) -> String {
    expr.to_token_stream()
        .to_string()
        .replace("- ", "-")
        .replace(" ;", ";")
}

/// The C++ pointer type of a C prototype, variadic ones included.
fn function_type(sig: &syn::Signature) -> Result<String, String> {
    let mut types = Vec::new();
    for input in &sig.inputs {
        let syn::FnArg::Typed(arg) = input else {
            return Err("a `self` parameter in a C prototype".into());
        };
        types.push(&*arg.ty);
    }
    let pointer = fnptr(&sig.output, types)?;
    Ok(match sig.variadic {
        Some(_) => pointer.replacen("parity::fnptr<", "parity::variadic_fnptr<", 1),
        None => pointer,
    })
}

/// `parity::fnptr<R, A...>` for a function returning `output` and taking `inputs`.
fn fnptr<'a>(
    output: &syn::ReturnType,
    inputs: impl IntoIterator<Item = &'a syn::Type>,
) -> Result<String, String> {
    let mut parts = vec![match output {
        syn::ReturnType::Default => "void".to_string(),
        syn::ReturnType::Type(_, ty) => cxx(ty)?,
    }];
    for ty in inputs {
        parts.push(cxx(ty)?);
    }
    Ok(format!("parity::fnptr<{}>", parts.join(", ")))
}

/// The C++ spelling of a type bindgen generated.
fn cxx(ty: &syn::Type) -> Result<String, String> {
    match ty {
        syn::Type::Ptr(p) => {
            let constness = match p.mutability {
                syn::PointerMutability::Const(_) => " const",
                syn::PointerMutability::Mut(_) => "",
            };
            Ok(format!("{}{constness}*", cxx(&p.elem)?))
        }
        syn::Type::Array(a) => Ok(format!(
            "parity::array<{}, {}>",
            cxx(&a.elem)?,
            tokens(&a.len).trim_end_matches("usize")
        )),
        syn::Type::FnPtr(f) => fnptr(&f.output, f.inputs.iter().map(|arg| &arg.ty)),
        syn::Type::Path(path) => {
            let segments: Vec<_> = path.path.segments.iter().collect();
            let last = segments.last().ok_or("an empty type path")?;
            let ident = last.ident.to_string();
            // Option<extern "C" fn> is how bindgen spells a nullable function pointer.
            if ident == "Option" {
                if let syn::PathArguments::AngleBracketed(args) = &last.arguments
                    && let Some(syn::GenericArgument::Type(inner)) = args.args.first()
                {
                    return cxx(inner);
                }
                return Err(format!("unexpected Option type {}", tokens(ty)));
            }
            // An enum's integer type in the module style: `E::Type` is the enum E itself.
            if ident == "Type" && segments.len() == 2 {
                return Ok(segments[0].ident.to_string());
            }
            Ok(primitive(&ident).map_or(ident, str::to_string))
        }
        _ => Err(format!("no C++ spelling for {}", tokens(ty))),
    }
}

fn primitive(rust: &str) -> Option<&'static str> {
    Some(match rust {
        "c_void" => "void",
        "c_char" => "char",
        "c_schar" => "signed char",
        "c_uchar" => "unsigned char",
        "c_short" => "short",
        "c_ushort" => "unsigned short",
        "c_int" => "int",
        "c_uint" => "unsigned int",
        "c_long" => "long",
        "c_ulong" => "unsigned long",
        "c_longlong" => "long long",
        "c_ulonglong" => "unsigned long long",
        "c_float" | "f32" => "float",
        "c_double" | "f64" => "double",
        "bool" => "bool",
        "i8" => "int8_t",
        "u8" => "uint8_t",
        "i16" => "int16_t",
        "u16" => "uint16_t",
        "i32" => "int32_t",
        "u32" => "uint32_t",
        "i64" => "int64_t",
        "u64" => "uint64_t",
        "usize" => "size_t",
        "isize" => "ptrdiff_t",
        _ => return None,
    })
}

fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from)
}

/// Compiles the checks against the headers under `include`; returns the names reported as
/// deprecated, or the compiler's errors.
fn compile(source: &Path, include: &Path) -> Result<BTreeSet<String>, String> {
    let output = Command::new(std::env::var("CXX").unwrap_or_else(|_| "g++".into()))
        // ASCII quotes around names, which `deprecated_name` looks for.
        .env("LC_ALL", "C")
        .args(["-std=c++17", "-fsyntax-only", "-Wdeprecated-declarations"])
        .arg(format!("-I{}", include.display()))
        .arg(source)
        .output()
        .map_err(|e| format!("cannot run g++: {e}"))?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        let errors: Vec<&str> = stderr.lines().filter(|l| l.contains("error")).collect();
        return Err(errors.join("\n"));
    }
    Ok(stderr.lines().filter_map(deprecated_name).collect())
}

/// The name in a g++ line `...: warning: 'NAME' is deprecated...`. Functions are quoted with
/// their signature (`'aclError aclrtQueryEvent(...)'`), fields as `T::field`.
fn deprecated_name(line: &str) -> Option<String> {
    let end = line.find("' is deprecated")?;
    let quoted = &line[..end];
    let quoted = &quoted[quoted.find('\'')? + 1..];
    let before_paren = quoted.split('(').next()?;
    before_paren.split_whitespace().last().map(str::to_string)
}

/// Each of our headers, with what it includes, must declare exactly the names CANN's header of
/// the same name declares.
fn placement(ours: &Path, theirs: &Path, headers: &[String]) -> Result<(), String> {
    let mut problems = String::new();
    for header in headers {
        let declared_ours = item_names(&run_bindgen(ours, &[header.as_str()], None, CONSTS)?);
        let declared_theirs = item_names(&run_bindgen(theirs, &[header.as_str()], None, CONSTS)?);
        let missing: Vec<_> = declared_theirs.difference(&declared_ours).collect();
        let extra: Vec<_> = declared_ours.difference(&declared_theirs).collect();
        if !missing.is_empty() {
            writeln!(
                problems,
                "{header}: CANN's declares, ours does not: {missing:?}"
            )
            .expect("writing to a String");
        }
        if !extra.is_empty() {
            writeln!(
                problems,
                "{header}: ours declares, CANN's does not: {extra:?}"
            )
            .expect("writing to a String");
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "our headers do not declare the names CANN's headers of the same name declare:\n{problems}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether bindgen can run here: it loads libclang at run time, which a machine with only
    /// a Rust toolchain and a C compiler lacks. `.ci/run` installs it and sets
    /// `NPU_REQUIRE_LIBCLANG`, under which its absence fails the test instead of skipping it.
    fn libclang_available() -> bool {
        if clang_sys::load().is_ok() {
            return true;
        }
        let required =
            std::env::var("NPU_REQUIRE_LIBCLANG").is_ok_and(|v| !v.is_empty() && v != "0");
        assert!(
            !required,
            "NPU_REQUIRE_LIBCLANG is set but libclang cannot be loaded"
        );
        eprintln!("skipped: libclang is not installed (apt-get install libclang-dev)");
        false
    }

    /// Without CANN's headers the generator is still exercised: its checks must hold for the
    /// headers they were generated from, deprecations included.
    #[test]
    fn the_checks_hold_for_our_own_headers() {
        if !libclang_available() {
            return;
        }
        let root = workspace_root();
        let ours = root.join(PROJECT_INCLUDE);
        let headers = header_files(&ours).unwrap();
        assert!(
            headers.contains(&"acl/acl_base_rt.h".to_string()),
            "{headers:?}"
        );
        let (source, count) = write_checks(&root, &ours, &headers, "self_check.cpp").unwrap();
        assert!(count > 500, "only {count} checks");
        let deprecated = compile(&source, &ours).unwrap();
        assert!(deprecated.contains("aclrtQueryEvent"), "{deprecated:?}");
        assert!(
            deprecated.contains("aclrtLaunchKernelAttrValue::localMemorySize"),
            "{deprecated:?}"
        );
    }

    #[test]
    fn inline_signatures_ignore_comments_spacing_and_bodies() {
        let header = "/* a */ template <typename T>\nstatic inline aclError f( T **p, size_t n = 0 ) // x\n\
                      { if (n) { return g(p); } return 0; }\n\
                      static inline aclError h(int32_t t) { return k(t); }\n";
        let found = inline_signatures(header);
        assert_eq!(
            found.into_iter().collect::<Vec<_>>(),
            [
                "static inline aclError h(int32_t t)",
                "template<typename T>static inline aclError f(T**p,size_t n=0)"
            ]
        );
    }

    #[test]
    fn our_cxx_only_headers_define_overloads() {
        let ours = workspace_root().join(PROJECT_INCLUDE);
        for header in CXX_ONLY_HEADERS {
            let text = fs::read_to_string(ours.join(header)).unwrap();
            assert!(inline_signatures(&text).len() > 20, "{header}");
        }
    }

    #[test]
    fn integer_literals_keep_their_suffix_and_nothing_else_passes() {
        for literal in ["0", "0x10000000UL", "0x01ULL", "107000", "0X1fU"] {
            assert!(is_integer_literal(literal), "{literal}");
        }
        for other in ["", "0x", "__attribute__((x))", "-1", "1.0", "ACL_X"] {
            assert!(!is_integer_literal(other), "{other}");
        }
        assert_eq!(integer_literal("(0X2U)"), Some("0X2U"));
        assert_eq!(integer_literal("16"), Some("16"));
        assert_eq!(integer_literal("(ACL_X)"), None);
    }

    #[test]
    fn deprecated_names_are_read_from_the_compiler() {
        let function = "x.cpp:3:9: warning: 'aclError aclrtQueryEvent(aclrtEvent, aclrtEventStatus*)' \
                        is deprecated: use aclrtQueryEventStatus [-Wdeprecated-declarations]";
        assert_eq!(
            deprecated_name(function).as_deref(),
            Some("aclrtQueryEvent")
        );
        let field = "x.cpp:4:1: warning: 'T::f' is deprecated [-Wdeprecated-declarations]";
        assert_eq!(deprecated_name(field).as_deref(), Some("T::f"));
        assert_eq!(deprecated_name("x.cpp:5:1: note: declared here"), None);
    }

    #[test]
    fn keyword_fields_lose_bindgen_s_underscore() {
        assert_eq!(c_name("type_"), "type");
        assert_eq!(c_name("rsv_"), "rsv_");
        assert_eq!(c_name("id"), "id");
    }

    /// The fields of a last anonymous union are the record's own, placed where it ends; an
    /// anonymous member elsewhere cannot be placed.
    #[test]
    fn anonymous_members_are_flattened() {
        let file: syn::File = syn::parse_quote! {
            pub struct Outer { pub a: u32, pub __bindgen_anon_1: Outer__bindgen_ty_1 }
            pub union Outer__bindgen_ty_1 { pub x: u64, pub y: u32 }
        };
        let layouts: BTreeMap<String, usize> = [
            ("Size of Outer", 16),
            ("Alignment of Outer", 8),
            ("Offset of field: Outer::a", 0),
            ("Size of Outer__bindgen_ty_1", 8),
            ("Offset of field: Outer__bindgen_ty_1::x", 0),
            ("Offset of field: Outer__bindgen_ty_1::y", 0),
        ]
        .into_iter()
        .map(|(label, value)| (label.to_string(), value))
        .collect();
        let records = records(&file);
        let fields = |name: &str| records[name].iter().copied();
        let flat = flattened("Outer", fields("Outer"), &records, &layouts).unwrap();
        let placed: Vec<_> = flat
            .iter()
            .map(|(n, _, o)| (n.clone().unwrap(), *o))
            .collect();
        assert_eq!(placed, [("a".into(), 0), ("x".into(), 8), ("y".into(), 8)]);
        assert!(anonymous_members(&file).contains("Outer__bindgen_ty_1"));

        let first: syn::File = syn::parse_quote! {
            pub struct Outer { pub __bindgen_anon_1: Outer__bindgen_ty_1, pub a: u32 }
            pub union Outer__bindgen_ty_1 { pub x: u64, pub y: u32 }
        };
        let records = super::records(&first);
        let fields = records["Outer"].iter().copied();
        assert!(flattened("Outer", fields, &records, &layouts).is_err());
    }
}
