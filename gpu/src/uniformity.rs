//! A static check that every barrier of a WGSL shader is in uniform control flow.
//!
//! `workgroupBarrier()` makes every invocation of a workgroup wait until all of them have
//! reached it. If some invocations skip it (it sits under an `if` whose condition differs
//! between them, or after a `return` or `break` that only some take), the workgroup may hang
//! or race, depending on the GPU. The WGSL specification makes this a compile error (Chrome's
//! compiler, Tint, rejects such a shader), but naga 30, the compiler inside wgpu, does not check
//! it for barriers, and lavapipe runs such a kernel without complaint. This module does.
//!
//! The analysis follows the specification's idea, simplified and conservative:
//!
//! * **Non-uniform values** come from `local_invocation_id` / `local_invocation_index`,
//!   `global_invocation_id`, the subgroup ids, loads from `workgroup`, `private` and read-write
//!   `storage` memory, atomics and subgroup operations; values computed from them, and local
//!   variables ever assigned a non-uniform value or assigned in non-uniform control flow,
//!   are non-uniform too. Uniform: literals, constants, overrides, `uniform` and read-only
//!   `storage` memory, `workgroup_id`, `num_workgroups` and `workgroupUniformLoad`.
//! * **Non-uniform control flow**: the branches of an `if` or `switch` on a non-uniform value,
//!   every iteration of a loop that some invocations may leave early (a `break`, `continue`
//!   or `return` under a non-uniform condition, or a `for` condition that is non-uniform), and
//!   everything after a non-uniform `return`.
//! * A barrier (or a call of a function that reaches one) in non-uniform control flow is
//!   reported with its line and the line of the condition that makes it non-uniform.
//!
//! Conservative means it may reject a correct shader whose uniformity needs finer reasoning (a
//! variable made non-uniform once and uniform again later, a pointer argument that a helper
//! writes through), rather than accept a barrier under a condition that depends on the
//! invocation. It is not the specification's full analysis: a shader it accepts is one whose
//! barriers depend only on the values it tracks.

use std::collections::{HashMap, HashSet};
use std::fmt;

use naga::{
    AddressSpace, Block, BuiltIn, Expression, Function, Handle, LocalVariable, Module, Span,
    Statement, StorageAccess,
};

/// A barrier that some invocations of a workgroup may not reach.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NonUniformBarrier {
    /// Line of the barrier (or of the call that leads to one).
    pub line: u32,
    /// What is there, e.g. `workgroupBarrier()`.
    pub what: &'static str,
    /// Line of the `if`, `switch` or loop whose condition makes the control flow non-uniform.
    pub because_of_line: u32,
}

impl fmt::Display for NonUniformBarrier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {}: {} in non-uniform control flow: the condition at line {} can differ \
             between the invocations of a workgroup, so some may never reach it (on a GPU the \
             workgroup can hang or race); move the barrier where every invocation reaches it",
            self.line, self.what, self.because_of_line
        )
    }
}

/// Parses `source` and checks every barrier of every entry point. `Err` holds the WGSL parse
/// error (as naga renders it) or the list of barriers in non-uniform control flow.
pub fn check_barriers(source: &str) -> Result<(), String> {
    // Worded as the kernels' own compile errors are (`GpuError::Shader`), so that a report can
    // tell a shader that does not compile from a barrier in the wrong place.
    let module = naga::front::wgsl::parse_str(source)
        .map_err(|e| format!("the shader does not parse: {}", e.emit_to_string(source)))?;
    let found = barriers_in_non_uniform_control_flow(&module, source);
    if found.is_empty() {
        Ok(())
    } else {
        Err(found.iter().map(|b| b.to_string()).collect::<Vec<_>>().join("\n"))
    }
}

/// Every barrier of every entry point of `module` that is in non-uniform control flow.
pub fn barriers_in_non_uniform_control_flow(
    module: &Module,
    source: &str,
) -> Vec<NonUniformBarrier> {
    let mut analysis = Analysis { module, source, summaries: HashMap::new(), found: Vec::new() };
    for entry in &module.entry_points {
        let arguments = entry
            .function
            .arguments
            .iter()
            .map(|a| match a.binding {
                Some(naga::Binding::BuiltIn(built_in)) => !uniform_built_in(built_in),
                _ => true,
            })
            .collect();
        let (_, found) = analysis.function(&entry.function, arguments);
        analysis.found.extend(found);
    }
    let mut found = analysis.found;
    found.sort_by_key(|b| (b.line, b.because_of_line));
    found.dedup();
    found
}

/// Built-in values that are the same for every invocation of a workgroup.
fn uniform_built_in(built_in: BuiltIn) -> bool {
    matches!(
        built_in,
        BuiltIn::WorkGroupId
            | BuiltIn::NumWorkGroups
            | BuiltIn::WorkGroupSize
            | BuiltIn::SubgroupSize
            | BuiltIn::NumSubgroups
    )
}

/// What a call of a function with given argument uniformity does, for its callers.
#[derive(Clone, Copy, Default)]
struct Summary {
    /// It reaches a barrier (itself or through a call).
    has_barrier: bool,
    /// Its result is non-uniform.
    returns_non_uniform: bool,
    /// It stores through a pointer argument.
    stores_through_arguments: bool,
    /// One of those stores is non-uniform (its value or address is, or it happens in
    /// non-uniform control flow): the caller's variable becomes non-uniform.
    stores_non_uniform_through_arguments: bool,
}

/// The non-uniform ways out of a block: the disruptor of a `break` (which leaves the innermost
/// loop or `switch`) and of a `continue` (which leaves the innermost loop's iteration) taken by
/// only some invocations. (A non-uniform `return` is kept in [`FunctionState::returned`].)
#[derive(Clone, Copy, Default)]
struct Exits {
    breaks: Option<Span>,
    continues: Option<Span>,
}

impl Exits {
    fn any(&self) -> Option<Span> {
        self.breaks.or(self.continues)
    }

    fn add(&mut self, other: Exits) {
        self.breaks = self.breaks.or(other.breaks);
        self.continues = self.continues.or(other.continues);
    }
}

/// A function analysed with its arguments' uniformity: its summary and what it found.
type Analysed = (Summary, Vec<NonUniformBarrier>);

struct Analysis<'a> {
    module: &'a Module,
    source: &'a str,
    /// Each function analysed, by its arguments' uniformity.
    summaries: HashMap<(Handle<Function>, Vec<bool>), Analysed>,
    /// What the function being analysed has found so far.
    found: Vec<NonUniformBarrier>,
}

/// The state of one function's analysis: which expressions and local variables are
/// non-uniform. Grows until nothing changes (a loop can make an earlier load non-uniform).
struct FunctionState<'f> {
    function: &'f Function,
    arguments: Vec<bool>,
    tainted_locals: HashSet<Handle<LocalVariable>>,
    call_results: HashMap<Handle<Expression>, bool>,
    summary: Summary,
    changed: bool,
    /// The condition of a `return` that only some invocations took: everything after it is
    /// non-uniform.
    returned: Option<Span>,
}

impl<'a> Analysis<'a> {
    /// Analyses `function` with `arguments[i]` telling whether argument `i` is non-uniform:
    /// what its callers need to know, and the barriers it reaches non-uniformly itself.
    fn function(&mut self, function: &Function, arguments: Vec<bool>) -> Analysed {
        let callers_found = std::mem::take(&mut self.found);
        let mut state = FunctionState {
            function,
            arguments,
            tainted_locals: HashSet::new(),
            call_results: HashMap::new(),
            summary: Summary::default(),
            changed: true,
            returned: None,
        };
        // Local variables initialised with a non-uniform value.
        for (handle, local) in function.local_variables.iter() {
            if local.init.is_some_and(|init| state.non_uniform(self.module, init)) {
                state.tainted_locals.insert(handle);
            }
        }
        // Taints only grow, so this settles; what the final round finds is the answer.
        while state.changed {
            state.changed = false;
            state.summary = Summary::default();
            state.returned = None;
            self.found.clear();
            self.block(&mut state, &function.body, None, &mut Exits::default());
        }
        (state.summary, std::mem::replace(&mut self.found, callers_found))
    }

    /// Walks `block`; `disruptor` is the span of the condition that makes the control flow
    /// non-uniform here (`None`: uniform). Records in `exits` a non-uniform `break` or
    /// `continue` met in the block.
    fn block(
        &mut self,
        state: &mut FunctionState,
        block: &Block,
        mut disruptor: Option<Span>,
        exits: &mut Exits,
    ) {
        for (statement, span) in block.span_iter() {
            disruptor = disruptor.or(state.returned);
            match statement {
                Statement::Block(inner) => self.block(state, inner, disruptor, exits),
                Statement::If { condition, accept, reject } => {
                    let non_uniform = state.non_uniform(self.module, *condition);
                    let inner = disruptor.or(non_uniform.then_some(*span));
                    let mut inner_exits = Exits::default();
                    self.block(state, accept, inner, &mut inner_exits);
                    self.block(state, reject, inner, &mut inner_exits);
                    exits.add(inner_exits);
                    // Those that left skip the rest: it runs for only some.
                    disruptor = disruptor.or(inner_exits.any());
                }
                Statement::Switch { selector, cases } => {
                    let non_uniform = state.non_uniform(self.module, *selector);
                    let inner = disruptor.or(non_uniform.then_some(*span));
                    let mut inner_exits = Exits::default();
                    for case in cases {
                        self.block(state, &case.body, inner, &mut inner_exits);
                    }
                    // A `break` leaves the switch, after which everyone runs again; a
                    // `continue` leaves the enclosing loop's iteration.
                    exits.continues = exits.continues.or(inner_exits.continues);
                    disruptor = disruptor.or(inner_exits.continues);
                }
                Statement::Loop { body, continuing, break_if } => {
                    // A first pass finds whether some invocations may leave an iteration
                    // early (or the loop, or the function); if so, every iteration is
                    // non-uniform.
                    let breaks_non_uniformly =
                        break_if.is_some_and(|c| state.non_uniform(self.module, c));
                    let returned_before = state.returned;
                    let mut loop_exits = Exits::default();
                    let found_before = self.found.len();
                    self.block(state, body, disruptor, &mut loop_exits);
                    self.block(state, continuing, disruptor, &mut loop_exits);
                    let returned_inside = state.returned.filter(|_| returned_before.is_none());
                    let leaves = loop_exits
                        .any()
                        .or(breaks_non_uniformly.then_some(*span))
                        .or(returned_inside);
                    if disruptor.is_none()
                        && let Some(cause) = leaves
                    {
                        self.found.truncate(found_before);
                        let mut ignored = Exits::default();
                        self.block(state, body, Some(cause), &mut ignored);
                        self.block(state, continuing, Some(cause), &mut ignored);
                    }
                }
                Statement::Break => {
                    exits.breaks = exits.breaks.or(disruptor);
                }
                Statement::Continue => {
                    exits.continues = exits.continues.or(disruptor);
                }
                Statement::Return { value } => {
                    if value.is_some_and(|v| state.non_uniform(self.module, v)) {
                        state.summary.returns_non_uniform = true;
                    }
                    if let Some(cause) = disruptor {
                        state.summary.returns_non_uniform = true;
                        state.returned.get_or_insert(cause);
                    }
                }
                Statement::Kill => {
                    if let Some(cause) = disruptor {
                        state.returned.get_or_insert(cause);
                    }
                }
                Statement::ControlBarrier(barrier) | Statement::MemoryBarrier(barrier) => {
                    let what = if *barrier == naga::Barrier::WORK_GROUP {
                        "workgroupBarrier()"
                    } else {
                        "a barrier"
                    };
                    self.barrier(state, *span, disruptor, what);
                }
                Statement::WorkGroupUniformLoad { .. } => {
                    self.barrier(state, *span, disruptor, "workgroupUniformLoad()");
                }
                Statement::Store { pointer, value } => {
                    let tainted = disruptor.is_some()
                        || state.non_uniform(self.module, *value)
                        || state.non_uniform(self.module, *pointer);
                    match state.root(*pointer) {
                        Some(Root::Local(local)) if tainted => state.taint(local),
                        Some(Root::Argument) => {
                            state.summary.stores_through_arguments = true;
                            state.summary.stores_non_uniform_through_arguments |= tainted;
                        }
                        _ => {}
                    }
                }
                Statement::Call { function, arguments, result } => {
                    let taints: Vec<bool> =
                        arguments.iter().map(|&a| state.non_uniform(self.module, a)).collect();
                    let callee = &self.module.functions[*function];
                    let key = (*function, taints.clone());
                    let (summary, inside) = match self.summaries.get(&key) {
                        Some(known) => known.clone(),
                        None => {
                            let known = self.function(callee, taints.clone());
                            self.summaries.insert(key, known.clone());
                            known
                        }
                    };
                    self.found.extend(inside);
                    if summary.has_barrier {
                        self.barrier(state, *span, disruptor, "a call that reaches a barrier");
                    }
                    if let Some(result) = result {
                        let non_uniform = summary.returns_non_uniform || disruptor.is_some();
                        if state.call_results.insert(*result, non_uniform) != Some(non_uniform) {
                            state.changed = true;
                        }
                    }
                    let stores_non_uniform = summary.stores_non_uniform_through_arguments
                        || (summary.stores_through_arguments
                            && (disruptor.is_some() || taints.iter().any(|&t| t)));
                    if stores_non_uniform {
                        for &argument in arguments {
                            if let Some(Root::Local(local)) = state.root(argument) {
                                state.taint(local);
                            }
                        }
                    }
                }
                // Atomics and subgroup operations produce non-uniform results (their result
                // expressions say so); the other statements cannot affect uniformity.
                _ => {}
            }
        }
    }

    fn barrier(
        &mut self,
        state: &mut FunctionState,
        span: Span,
        disruptor: Option<Span>,
        what: &'static str,
    ) {
        state.summary.has_barrier = true;
        if let Some(cause) = disruptor {
            let line = |s: Span| s.location(self.source).line_number;
            self.found.push(NonUniformBarrier {
                line: line(span),
                what,
                because_of_line: line(cause),
            });
        }
    }
}

/// Where a pointer points: a local variable, a function argument, or a global.
enum Root {
    Local(Handle<LocalVariable>),
    Argument,
    Global,
}

impl FunctionState<'_> {
    fn taint(&mut self, local: Handle<LocalVariable>) {
        if self.tainted_locals.insert(local) {
            self.changed = true;
        }
    }

    /// The variable a pointer expression points into.
    fn root(&self, pointer: Handle<Expression>) -> Option<Root> {
        match self.function.expressions[pointer] {
            Expression::LocalVariable(local) => Some(Root::Local(local)),
            Expression::FunctionArgument(_) => Some(Root::Argument),
            Expression::GlobalVariable(_) => Some(Root::Global),
            Expression::Access { base, .. } | Expression::AccessIndex { base, .. } => {
                self.root(base)
            }
            _ => None,
        }
    }

    /// Whether `pointer` points into memory that other invocations may write between loads:
    /// `workgroup`, `private` (each invocation's own) or read-write `storage` memory.
    fn reads_varying_memory(&self, module: &Module, pointer: Handle<Expression>) -> bool {
        let mut at = pointer;
        loop {
            match self.function.expressions[at] {
                Expression::Access { base, .. } | Expression::AccessIndex { base, .. } => at = base,
                Expression::GlobalVariable(global) => {
                    return match module.global_variables[global].space {
                        AddressSpace::Uniform | AddressSpace::Handle | AddressSpace::Immediate => {
                            false
                        }
                        AddressSpace::Storage { access } => access.contains(StorageAccess::STORE),
                        _ => true,
                    };
                }
                _ => return false,
            }
        }
    }

    /// Whether `expression` may differ between the invocations of a workgroup.
    fn non_uniform(&self, module: &Module, expression: Handle<Expression>) -> bool {
        let any =
            |handles: &[Handle<Expression>]| handles.iter().any(|&h| self.non_uniform(module, h));
        match &self.function.expressions[expression] {
            Expression::Literal(_)
            | Expression::Constant(_)
            | Expression::Override(_)
            | Expression::ZeroValue(_)
            | Expression::WorkGroupUniformLoadResult { .. } => false,
            Expression::FunctionArgument(i) => self.arguments[*i as usize],
            Expression::LocalVariable(local) => self.tainted_locals.contains(local),
            // An address is the same for everyone; what is loaded through it may not be.
            Expression::GlobalVariable(_) => false,
            Expression::CallResult(_) => {
                self.call_results.get(&expression).copied().unwrap_or(false)
            }
            Expression::Load { pointer } => {
                self.non_uniform(module, *pointer) || self.reads_varying_memory(module, *pointer)
            }
            Expression::Access { base, index } => any(&[*base, *index]),
            Expression::AccessIndex { base, .. } => self.non_uniform(module, *base),
            Expression::Compose { components, .. } => any(components),
            Expression::Splat { value, .. } => self.non_uniform(module, *value),
            Expression::Swizzle { vector, .. } => self.non_uniform(module, *vector),
            Expression::Unary { expr, .. } | Expression::As { expr, .. } => {
                self.non_uniform(module, *expr)
            }
            Expression::Binary { left, right, .. } => any(&[*left, *right]),
            Expression::Select { condition, accept, reject } => {
                any(&[*condition, *accept, *reject])
            }
            Expression::Relational { argument, .. } => self.non_uniform(module, *argument),
            Expression::Math { arg, arg1, arg2, arg3, .. } => {
                let args: Vec<_> =
                    [Some(*arg), *arg1, *arg2, *arg3].into_iter().flatten().collect();
                any(&args)
            }
            Expression::ArrayLength(array) => self.non_uniform(module, *array),
            // Atomics, subgroup operations, images, ray queries: treated as non-uniform.
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "
@group(0) @binding(0) var<storage, read> data: array<u32>;
@group(0) @binding(1) var<uniform> n: u32;
var<workgroup> shared_data: array<u32, 64>;
";

    fn check(body: &str) -> Result<(), String> {
        let source = format!(
            "{HEADER}
@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) thread: u32, @builtin(workgroup_id) group: vec3<u32>) {{
{body}
}}"
        );
        check_barriers(&source)
    }

    #[test]
    fn barriers_in_uniform_loops_and_branches_pass() {
        check("workgroupBarrier();").unwrap();
        check("for (var i = 0u; i < n; i++) { shared_data[thread] = i; workgroupBarrier(); }")
            .unwrap();
        check("if group.x < n { workgroupBarrier(); }").unwrap();
        check("let end = min(group.x * 64u + 64u, n); for (var i = group.x; i < end; i += 8u) { workgroupBarrier(); }")
            .unwrap();
        // A non-uniform branch without a barrier is fine.
        check("if thread < n { shared_data[thread] = 1u; } workgroupBarrier();").unwrap();
    }

    #[test]
    fn a_barrier_under_a_condition_on_the_invocation_is_reported_with_its_lines() {
        let err =
            check("let valid = thread < n;\nif valid {\n    workgroupBarrier();\n}").unwrap_err();
        // The body starts on line 8 of the generated source.
        assert!(err.starts_with("line 10: workgroupBarrier()"), "{err}");
        assert!(err.contains("the condition at line 9"), "{err}"); // the `if`
    }

    #[test]
    fn early_exits_and_non_uniform_loops_are_caught() {
        // An early return for some invocations: everything after it is non-uniform.
        assert!(check("if thread >= n { return; }\nworkgroupBarrier();").is_err());
        // A loop whose trip count depends on the invocation.
        assert!(check("for (var i = 0u; i < thread; i++) { workgroupBarrier(); }").is_err());
        // A break taken by some invocations only.
        assert!(
            check("for (var i = 0u; i < n; i++) { if i == thread { break; } workgroupBarrier(); }")
                .is_err()
        );
        // A variable that became non-uniform by assignment.
        assert!(
            check("var k = 0u;\nif thread == 0u { k = 1u; }\nif k == 1u { workgroupBarrier(); }")
                .is_err()
        );
        // A value loaded from workgroup memory.
        assert!(check("if shared_data[0] == 1u { workgroupBarrier(); }").is_err());
    }

    #[test]
    fn non_uniform_values_that_travel_through_pointers_or_exits_are_caught() {
        // A helper stores a workgroup-memory value through its pointer argument.
        let source = format!(
            "{HEADER}
fn get(p: ptr<function, u32>) {{ *p = shared_data[0]; }}
@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) thread: u32) {{
    var f = 0u;
    get(&f);
    if f == 1u {{ workgroupBarrier(); }}
}}"
        );
        assert!(check_barriers(&source).is_err());
        // A return in an inner loop: the next iteration of the outer one runs for only some.
        assert!(
            check("var t = 0u;\nwhile t < n { t += 1u; workgroupBarrier(); for (var j = 0u; j < 4u; j++) { if thread == j { return; } } }")
                .is_err()
        );
    }

    #[test]
    fn uniform_breaks_out_of_a_switch_and_array_lengths_pass() {
        // `break` in a switch leaves the switch, not the loop, and everyone meets again after it.
        check("for (var i = 0u; i < n; i++) { switch i { case 0u: { break; } default: { } } workgroupBarrier(); }")
            .unwrap();
        // The length of a read-write buffer is the same for everyone.
        let source = format!(
            "{HEADER}
@group(0) @binding(2) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) thread: u32) {{
    for (var i = 0u; i < arrayLength(&out); i++) {{ workgroupBarrier(); }}
}}"
        );
        check_barriers(&source).unwrap();
    }

    #[test]
    fn barriers_reached_through_a_call_are_checked_at_the_call() {
        let source = format!(
            "{HEADER}
fn sync_all() {{ workgroupBarrier(); }}
fn bound(x: u32) -> u32 {{ return x + 1u; }}
@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) thread: u32) {{
    for (var i = 0u; i < bound(n); i++) {{ sync_all(); }}
    if thread < bound(n) {{
        sync_all();
    }}
}}"
        );
        let err = check_barriers(&source).unwrap_err();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("line 12: a call that reaches a barrier"), "{err}");
    }

    #[test]
    fn a_parse_error_is_reported_as_naga_renders_it() {
        let err = check("let x: f32 = ;").unwrap_err();
        assert!(err.contains("error"), "{err}");
    }

    #[test]
    fn a_shader_that_does_not_parse_is_said_so_as_the_kernels_say_it() {
        let err =
            check_barriers("@compute @workgroup_size(1) fn main() { let x == 1u; }").unwrap_err();
        assert!(err.starts_with("the shader does not parse: "), "{err}");
    }
}
