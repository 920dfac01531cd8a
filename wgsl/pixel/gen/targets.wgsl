// The draw's render targets: one rgba32float output per field, r0 at location 0 and so on.
struct Out {
    {{FIELDS}}
}
