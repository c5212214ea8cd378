// Unit tests of the Jinja renderer (rlx/models/jinja.h) that need no data files: every
// feature on small templates, error messages with line and column, and hostile templates
// (deep nesting, huge ranges and outputs, runaway recursion) ending in a budget error.
// The expected outputs of the feature table are what Jinja2 3.1 renders in transformers'
// environment (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols).
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "rlx/models/jinja.h"

namespace rlx::jinja {
namespace {

// The variables of the feature table.
constexpr const char* kContext = R"JSON({"l": [1, 2, 3], "d": {"a": 1, "items": 5, "b": {"c": [1, {"x": "y"}]}}, "s": "héllo wörld", "n": null, "e": [], "t": true, "f": 1.5, "msgs": [{"role": "system", "content": "S"}, {"role": "user", "content": " hi "}, {"role": "assistant", "content": "yo", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]}], "u": "  Ünïcödé x　 ", "names": ["b", "A", "a", "C"], "nums": [3, 1.5, -2, true]})JSON";

std::tm fixed_clock() {
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 10;
  tm.tm_mday = 27;
  tm.tm_hour = 12;
  tm.tm_wday = 5;
  tm.tm_yday = 330;
  return tm;
}

Value context() {
  auto v = Value::from_json(nlohmann::ordered_json::parse(kContext));
  EXPECT_TRUE(v);
  return v ? *v : Value();
}

Expected<std::string> render(std::string_view source, const Value& vars = Value(), RenderOptions options = {}) {
  ASSIGN_OR_RETURN(Template t, parse(source));
  if (!options.clock) options.clock = fixed_clock;
  return t.render(vars, options);
}

struct Row {
  const char* source;
  const char* expected;
};

const Row kRows[] = {
// values and printing
    {"{{ l }}|{{ d }}|{{ s }}|{{ n }}|{{ e }}|{{ t }}|{{ f }}|{{ x }}", "[1, 2, 3]|{'a': 1, 'items': 5, 'b': {'c': [1, {'x': 'y'}]}}|héllo wörld|None|[]|True|1.5|"},
    {"{{ (1,) }}{{ (1, 2) }}{{ [1, 'a', none, true, 1.0] }}{{ {'a': [1]} }}{{ () }}", "(1,)(1, 2)[1, 'a', None, True, 1.0]{'a': [1]}()"},
    {"{{ 1e16 }} {{ 1e-5 }} {{ 0.1 + 0.2 }} {{ 1 / 3 }} {{ 10 / 2 }} {{ 2.0 ** 70 }} {{ -0.0 }}", "1e+16 1e-05 0.30000000000000004 0.3333333333333333 5.0 1.1805916207174113e+21 -0.0"},
    {"{{ ['it\\'s', 'a\"b', \"x'y\\\"z\", '\\n\\x01\\u00e9\\t\\\\'] }}", "[\"it's\", 'a\"b', 'x\\'y\"z', '\\n\\x01é\\t\\\\']"},
    {"{{ [s, '\\x7f', '\\x80\\xa0x', 'a\\\\b\\'c'] }}", "['héllo wörld', '\\x7f', '\\x80\\xa0x', \"a\\\\b'c\"]"},
    {"{{ 'a' 'b' \"c\" }}{{ 'a\\u00e9\\x41\\101' }}{{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1_000 }} {{ 1.5e3 }} {{ True }} {{ None }}", "abcaéAA31 15 5 1000 1500.0 True None"},
// whitespace control
    {"a\n  {% if true %}\n  b\n  {% endif %}\nc\n", "a\n  b\nc"},
    {"a\n  {%- if true %}\n  b\n  {% endif -%}\n  c", "a  b\nc"},
    {"  {% for i in l %}\n    {{ i }}\n  {% endfor %}\n", "    1\n    2\n    3\n"},
    {"x {% if true %} y {% endif %} z", "x  y  z"},
    {"x\n  {{ s }}\n  {# c #}\n  y\n", "x\n  héllo wörld\n  y"},
    {"{# c -#}   \n  x", "x"},
    {"{%+ if true %}\n  x{% endif %}", "  x"},
    {"  {%+ if true %}x{% endif %}", "  x"},
    {"{% if true +%}\nx{% endif %}", "\nx"},
    {"{{ f -}}   \n\n y {{- f }}", "1.5y1.5"},
    {"a  {%- raw -%}  {{ x }}  {%- endraw -%}  b", "a{{ x }}b"},
    {"line1\x0d\nline2\x0d{{ f }}\n", "line1\nline2\n1.5"},
    {"trailing newline\n\n", "trailing newline\n"},
    {"{%- for i in l %}\n  {%- if i == 1 %}\n    one\n  {%- else %}\n    other\n  {%- endif %}\n{%- endfor %}\n", "    one    other    other"},
    {"  {% if true %}x{% endif %}|{% if true -%} 　 x{% endif %}", "x|x"},
    {"{% macro m() -%}\n  body\n{%- endmacro %}\n[{{ m() }}]", "[body]"},
// operators
    {"{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }}", "3 -4 2 -2 1024 0.5 64 4 3.0 0.5"},
    {"{{ 1 if false }}|{{ true and 3 }}|{{ 0 or 'x' }}|{{ not none }}|{{ none or false }}|{{ [] and 1 }}", "|3|x|True|False|[]"},
    {"{{ 1 < 2 < 3 }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 3 > 2 > 2 }} {{ [1, 2] < [1, 3] }} {{ 'a' < 'b' }} {{ (1, 2) == [1, 2] }} {{ {'a': 1} == {'a': 1.0} }}", "True True True False True True False True"},
    {"{{ [1, 2] + [3] }} {{ 'ab' * 3 }} {{ [0] * 2 }} {{ 3 * 'x' }} {{ 'x' * 0 }}|{{ 'a' ~ 1 ~ none ~ x ~ [2] }}", "[1, 2, 3] ababab [0, 0] xxx |a1None[2]"},
    {"{{ 'x' in 'xyz' }} {{ 'a' in d }} {{ 2 in l }} {{ 9 not in l }} {{ 'q' in x }} {{ 'items' in d }}", "True True True True False True"},
    {"{{ -l[0] }} {{ +3 }} {{ -(3) }} {{ not 1 == 2 }} {{ (1 + 2) * 3 }} {{ 1 + 2 * 3 }} {{ 10 - 2 - 3 }} {{ 'a' ~ (1 + 2) }}", "-1 3 -3 True 9 7 5 a3"},
    {"{{ 'a' if none else 'b' if 0 else 'c' }} {{ l|join(',') if l else 'empty' }}", "c 1,2,3"},
    {"{{ '%s and %d and %05.2f and %r and %x' % ('a', 3, 3.14159, 'q', 255) }} {{ '%(a)s-%(b)s' % {'a': 1, 'b': 2} }} {{ '%5s|%-5s|' % ('a', 'b') }}", "a and 3 and 03.14 and 'q' and ff 1-2     a|b    |"},
// attributes, items and slices
    {"{{ d.a }} {{ d['items'] }} {{ d.b.c[1].x }} {{ d.b.c.0 }} [{{ d.zz }}] [{{ n.foo }}]", "1 5 y 1 [] []"},
    {"[{{ l[10] }}] {{ s[1] }} {{ s[-2:] }} {{ s|length }} {{ s[::-1] }} {{ s[1:8:2] }} {{ l[::-1] }} {{ l[-100:100] }} {{ l[5:1:-1] }} {{ l[True] }}", "[] é ld 11 dlröw olléh él ö [3, 2, 1] [1, 2, 3] [3] 2"},
    {"{{ msgs[0].role }} {{ msgs[0]['content'] }} {{ msgs[-1].tool_calls[0].function.arguments|tojson }} {{ msgs[1:]|length }}", "system S {\"a\": 1} 2"},
    {"{{ d.get('a') }} {{ d.get('zz', 7) }} {{ d.get('zz') }} {{ d.items()|list }} {{ d.keys()|list }} {{ d.values()|list }}", "1 7 None [('a', 1), ('items', 5), ('b', {'c': [1, {'x': 'y'}]})] ['a', 'items', 'b'] [1, 5, {'c': [1, {'x': 'y'}]}]"},
// statements
    {"{% if 1 %}a{% elif 2 %}b{% else %}c{% endif %}{% if 0 %}a{% elif 2 %}b{% else %}c{% endif %}{% if 0 %}a{% elif 0 %}b{% else %}c{% endif %}", "abc"},
    {"{% for a in [1, 2, 3] if a > 1 %}{{ loop.index }}/{{ loop.length }} {{ loop.index0 }} {{ loop.first }} {{ loop.last }} {{ loop.previtem }} {{ loop.nextitem }} {{ loop.revindex }} {{ loop.revindex0 }} {{ loop.cycle('o', 'e') }};{% else %}none{% endfor %}", "1/2 0 True False  3 2 1 o;2/2 1 False True 2  1 0 e;"},
    {"{% for a in [] %}x{% else %}none{% endfor %} {% for k, v in d|items %}{{ k }}={{ v }};{% endfor %} {% for k in d %}{{ k }}{% endfor %} {% for c in 'héé' %}[{{ c }}]{% endfor %} {% for a, b in [[1, 2], [3, 4]] %}{{ a }}{{ b }}{% endfor %} {% for (a, b) in [(1, 2)] %}{{ a + b }}{% endfor %}", "none a=1;items=5;b={'c': [1, {'x': 'y'}]}; aitemsb [h][é][é] 1234 3"},
    {"{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}", "0134"},
    {"{% for i in range(2) %}{% for j in range(2) %}{{ loop.index }}{{ i }}{{ j }}{% if j == 0 %}{% break %}{% endif %}{% endfor %}{{ loop.index }}{% endfor %}", "10011102"},
    {"{% for i in [1, 1, 2] %}{% if loop.changed(i) %}{{ i }}{% endif %}{% endfor %}", "12"},
    {"{% set c = 0 %}{% for i in range(3) %}{% set c = c + 1 %}{{ c }}{% endfor %}{{ c }}", "1110"},
    {"{% for i in range(3) %}{% if i == 0 %}{% set y = 5 %}{% endif %}[{{ y }}]{% endfor %}{% if true %}{% set z = 1 %}{% endif %}{{ z }}", "[5][][]1"},
    {"{% set ns = namespace(a=1) %}{% set ns.b = 2 %}{{ ns.a }}{{ ns.b }}{{ ns['a'] }} {{ ns }} [{{ ns.c }}]{% for i in range(3) %}{% set ns.a = ns.a + i %}{% endfor %} {{ ns.a }}", "121 <Namespace {'a': 1, 'b': 2}> [] 4"},
    {"{% set a, b = 1, 2 %}{{ a }}{{ b }} {% set q = (1, 2) %}{{ q }}", "12 (1, 2)"},
    {"{% set x %}abc{{ 1 }}{% endset %}{{ x|upper }} {% set y | trim | upper %}  zz {% endset %}[{{ y }}]", "ABC1 [ZZ]"},
    {"{% filter upper %}abc{{ 'def' }}{% endfilter %}", "ABCDEF"},
    {"{% with a = 1, b = 2 %}{{ a }}{{ b }}{% endwith %}[{{ a }}]", "12[]"},
    {"{% raw %}{{ not rendered }}{% endraw %}{# comment #}done", "{{ not rendered }}done"},
// macros
    {"{% macro m(a, b=2) %}{{ a }}{{ b }}{{ varargs }}{% endmacro %}{{ m(1) }} {{ m(1, 3, 4) }} {{ m(b=5, a=0) }}", "12() 13(4,) 05()"},
    {"{% macro k(a) %}{{ kwargs }}{{ a }}{% endmacro %}{{ k(1, z=2) }}", "{'z': 2}1"},
    {"{% macro m(a) %}[{{ a }}]{% endmacro %}{{ m() }}{% macro m2(a, b=a) %}{{ b }}{% endmacro %}{{ m2(3) }}", "[]3"},
    {"{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}", "321"},
    {"{% macro g() %}{{ gg }}{% endmacro %}{% set gg = 1 %}{{ g() }}{% set gg = 2 %}{{ g() }}", "12"},
    {"{% for i in [1, 2] %}{% macro h() %}{{ i }}{% endmacro %}{{ h() }}{% endfor %}", "12"},
    {"{% macro w(a) %}[{{ caller(a) }}]{% endmacro %}{% call(q) w(5) %}inner{{ q }}{% endcall %}", "[inner5]"},
    {"{% macro m() %}x{% endmacro %}{{ m is callable }} {{ m.name }} {{ m }}", "True m <Macro 'm'>"},
// filters
    {"{{ '  a  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ u|trim }}|{{ u|length }}", "a|a|Ünïcödé x|13"},
    {"{{ 'hello world'|title }} {{ \"they're x-y (z)\"|title }} {{ \"tHEY're\"|capitalize }} {{ s|upper }} {{ 'ÀÉ'|lower }} {{ 'straße'|upper }}", "Hello World They're X-Y (Z) They're HÉLLO WÖRLD àé STRASSE"},
    {"{{ l|tojson }}|{{ {'a': 'é\"\\n', 'b': [1, 2.0, none, true, {}], 'c': []}|tojson }}|{{ {'a': 1, 'b': [1, 2]}|tojson(indent=2) }}|{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}|{{ [1, {'a': 2}]|tojson(separators=(',', ':')) }}|{{ 'é'|tojson(ensure_ascii=true) }}|{{ '😀'|tojson(true) }}|{{ {1: 2, true: 3, none: 4}|tojson }}|{{ [1]|tojson(indent=0) }}|{{ [[]]|tojson(indent='\\t') }}", "[1, 2, 3]|{\"a\": \"é\\\"\\n\", \"b\": [1, 2.0, null, true, {}], \"c\": []}|{\n  \"a\": 1,\n  \"b\": [\n    1,\n    2\n  ]\n}|{\"a\": 2, \"b\": 1}|[1,{\"a\":2}]|\"\\u00e9\"|\"\\ud83d\\ude00\"|{\"1\": 3, \"null\": 4}|[\n1\n]|[\n\t[]\n]"},
    {"{{ l|length }} {{ d|count }} {{ x|length }} {{ l|first }} {{ l|last }} [{{ e|first }}] {{ 'abc'|first }}{{ 'abc'|last }} {{ l|join }} {{ l|join(', ') }} {{ [none, x, 1]|join('-') }}", "3 3 0 1 3 [] ac 123 1, 2, 3 None--1"},
    {"{{ x|default('D') }} {{ none|default('D') }} {{ ''|default('D', true) }} {{ 0|d('Z', boolean=true) }} {{ 'v'|d('Z') }}", "D None D Z v"},
    {"{{ 'a-b-c'|replace('-', '+') }} {{ 'a-b-c'|replace('-', '+', 1) }} {{ 'abc'|replace('', '.') }} {{ none|string }} {{ [1, 'a']|string }} [{{ x|string }}]", "a+b+c a+b-c .a.b.c. None [1, 'a'] []"},
    {"{{ names|sort }} {{ names|sort(case_sensitive=true) }} {{ names|sort(reverse=true) }} {{ names|unique|list }} {{ names|unique(case_sensitive=true)|list }} {{ names|min }} {{ names|max }} {{ nums|sum }} {{ nums|sort }} {{ nums|max }}", "['A', 'a', 'b', 'C'] ['A', 'C', 'a', 'b'] ['C', 'b', 'A', 'a'] ['b', 'A', 'C'] ['b', 'A', 'a', 'C'] A C 3.5 [-2, True, 1.5, 3] 3"},
    {"{{ msgs|sort(attribute='role')|map(attribute='content')|join('/') }} {{ msgs[2:]|map(attribute='tool_calls.0.function.name')|list }} {{ [[1, 2], [3, 4]]|map(attribute=1)|list }} {{ [{'a': 1}, {'b': 3}]|map(attribute='a', default=9)|list }}", "yo/S/ hi  ['f'] [2, 4] [1, 9]"},
    {"{{ msgs|selectattr('role', 'equalto', 'user')|list }} {{ msgs|rejectattr('role', 'eq', 'user')|map(attribute='role')|join(',') }} {{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('odd')|list }} {{ [0, 1, '', none, 'x']|select|list }} {{ ['a', 'B']|map('upper')|join }} {{ msgs|selectattr('tool_calls', 'defined')|list|length }}", "[{'role': 'user', 'content': ' hi '}] system,assistant [1, 3] [2, 4] [1, 'x'] AB 1"},
    {"{{ 'abc'|reverse }} {{ [1, 2, 3]|reverse|list }} {{ d|list }} {{ 'ab'|list }} {{ d|items|list }} {{ d|dictsort }} {{ {'b': 1, 'a': 2}|dictsort(by='value') }}", "cba [3, 2, 1] ['a', 'items', 'b'] ['a', 'b'] [('a', 1), ('items', 5), ('b', {'c': [1, {'x': 'y'}]})] [('a', 1), ('b', {'c': [1, {'x': 'y'}]}), ('items', 5)] [('b', 1), ('a', 2)]"},
    {"{{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ true|int }} {{ none|int }} {{ '1A'|int(0, 16) }} {{ ' 12 '|int }} {{ '3'|float }} {{ 'abc'|float }} {{ 2|float }} {{ -3|abs }} {{ -2.5|abs }}", "42 4 0 7 3 1 0 26 12 3.0 0.0 2.0 3 2.5"},
    {"{{ 2.5|round }} {{ 3|round }} {{ 1.5|round }} {{ 2.675|round(2) }} {{ 3.14159|round(3, 'floor') }} {{ 3.14159|round(1, 'ceil') }} {{ -0.5|round }}", "2.0 3 2.0 2.67 3.141 3.2 -0.0"},
    {"{{ '  x\\n  y\\n\\nz'|indent(2) }}|{{ 'x\\ny'|indent(2, first=true) }}|{{ 'x\\n\\ny'|indent(2, blank=true) }}|{{ 'x\\ny'|indent('>>') }}|{{ ''|indent }}", "  x\n    y\n\n  z|  x\n  y|x\n  \n  y|x\n>>y|"},
    {"{{ [1, 2, 3, 4, 5]|batch(2)|list }} {{ [1, 2, 3]|batch(2, 'x')|list }} {{ 'hello %s'|format('x') }} {{ 'abc'|center(9) }}| {{ 'a b-c'|wordcount }} {{ 'hello world foo'|truncate(9) }}| {{ 'hello world foo'|truncate(9, true) }}|", "[[1, 2], [3, 4], [5]] [[1, 2], [3, 'x']] hello x    abc   | 3 hello...| hello ...|"},
    {"{{ 'a<b>&\"\\''|e }} {{ 'a<b'|escape }} {{ 5|safe }} {{ '<p>a  <b>b</b></p>'|striptags }} {{ d|attr('a') }} {{ [1]|pprint }}", "a&lt;b&gt;&amp;&#34;&#39; a&lt;b 5 a b  [1]"},
    {"{{ l|map('string')|first }} {{ (l|select('even')) is iterable }} {{ (l|select('even')) is sequence }} {{ 'yes' if e|select else 'no' }}", "1 True False yes"},
// tests
    {"{{ x is defined }} {{ none is none }} {{ 1 is number }} {{ true is number }} {{ true is integer }} {{ 'a' is iterable }} {{ x is iterable }} {{ x is sequence }} {{ {} is mapping }} {{ 1.0 is float }} {{ true is boolean }} {{ false is false }} {{ true is true }} {{ 'a' is string }}", "False True True True False True True True True True True True True True"},
    {"{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 'a' is lower }} {{ 'A' is upper }} {{ 'Ab' is upper }} {{ x is callable }} {{ x is undefined }} {{ l is not none }}", "True True True False True True False True True True"},
    {"{{ 1 is eq 1 }} {{ 1 is ne 2 }} {{ 1 is lt 2 }} {{ 1 is gt 2 }} {{ 1 is le 1 }} {{ 1 is ge 2 }} {{ 1 is in [1, 2] }} {{ 'a' is in 'abc' }} {{ none is sameas none }} {{ 'upper' is filter }} {{ 'defined' is test }} {{ 'x' is equalto 'x' }}", "True True True False True False True True True True True True"},
// string methods
    {"{{ u.strip() }}|{{ u.split() }}|{{ 'a b c'.split() }}|{{ 'a,b,,c'.split(',') }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a b  c '.rsplit(None, 1) }}|{{ ' a b c'.split(None, 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ '  x '.lstrip() }}|{{ ' x  '.rstrip() }}|{{ 'xyx'.strip('x') }}", "Ünïcödé x|['Ünïcödé', 'x']|['a', 'b', 'c']|['a', 'b', '', 'c']|['a', 'b c']|['a b', 'c']|['a', 'b c']|['a,b', 'c']|x | x|y"},
    {"{{ 'abc'.startswith('a') }} {{ 'abc'.endswith(('x', 'c')) }} {{ 'abc'.startswith('b', 1) }} {{ 'a-b-c'.replace('-', '+', 1) }} {{ 'abca'.find('a', 1) }} {{ 'abca'.rfind('a') }} {{ 'abca'.count('a') }} {{ ','.join(['a', 'b']) }}", "True True True a+b-c 3 3 2 a,b"},
    {"{{ '42'.isdigit() }} {{ 'ab'.isalpha() }} {{ ' '.isspace() }} {{ '7'.zfill(3) }} {{ 'x'.center(5, '*') }} {{ 'x'.ljust(3) }}|{{ 'x'.rjust(3) }}| {{ 'a=b=c'.partition('=') }} {{ 'a=b=c'.rpartition('=') }} {{ '{} and {}'.format(1, 'x') }} {{ '{0}{0}{b}'.format(1, b=2) }} {{ 'xyz'.removeprefix('x') }}", "True True True 007 **x** x  |  x| ('a', '=', 'b=c') ('a=b', '=', 'c') 1 and x 112 yz"},
    {"{{ \"they're 1st x\".title() }} {{ 'hELLO'.capitalize() }} {{ 'MiXeD'.lower() }} {{ 'MiXeD'.upper() }} {{ s.split('l')|length }} {{ 'a</think>b'.split('</think>')[-1] }}", "They'Re 1St X Hello mixed MIXED 4 b"},
// globals
    {"{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5)|join(',') }} {{ range(10, 0, -3)|list }} {{ range(0)|list }}", "[0, 1, 2] [1, 4, 7] 0,1,2,3,4 [10, 7, 4, 1] []"},
    {"{{ dict(a=1, b=2) }} {{ dict([('x', 1)]) }} {{ namespace(a=1).a }}", "{'a': 1, 'b': 2} {'x': 1} 1"},
    {"{{ strftime_now('%d %b %Y') }} {{ strftime_now('%A %H:%M %j %%') }} {{ strftime_now is defined }} {{ raise_exception is defined }}", "27 Nov 2026 Friday 12:00 331 % True True"},
};

TEST(Jinja, RendersLikeJinja2) {
  const Value vars = context();
  for (const Row& row : kRows) {
    auto out = render(row.source, vars);
    if (!out) {
      ADD_FAILURE() << row.source << "\n  -> " << out.error().to_string();
      continue;
    }
    EXPECT_EQ(*out, row.expected) << row.source;
  }
  // What Jinja prints with an address, printed without one.
  EXPECT_EQ(*render("{{ [1, 2]|select('odd') }} {{ d.items }}", vars),
            "<generator object> <built-in method items of dict object>");
}

TEST(Jinja, RaiseExceptionEndsTheRenderWithExactlyItsMessage) {
  auto out = render("line one\n{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}"
                    "{% endif %}",
                    *Value::from_json(nlohmann::json::parse(R"({"messages": [{"role": "system"}]})")));
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(out.error().message(), "System role not supported");
  // From inside a macro and a loop, too.
  out = render("{% macro check(m) %}{% if m != 'user' %}{{ raise_exception('roles must alternate: ' ~ m) }}"
               "{% endif %}{% endmacro %}{% for m in ['user', 'bot'] %}{{ check(m) }}{% endfor %}");
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().message(), "roles must alternate: bot");
  // Without its message, or with an empty one, the error still says what happened (the
  // fuzzer's find: an empty error message).
  out = render("{{ raise_exception() }}");
  ASSERT_FALSE(out);
  EXPECT_NE(out.error().message().find("raise_exception() needs its message argument"), std::string::npos)
      << out.error().message();
  out = render("{{ raise_exception('') }}");
  ASSERT_FALSE(out);
  EXPECT_NE(out.error().message().find("raise_exception() was called with an empty message"), std::string::npos)
      << out.error().message();
}

TEST(Jinja, RunTimeErrorsNameLineAndColumn) {
  const Value vars = context();
  struct Case {
    const char* source;
    const char* message;
  } cases[] = {
      {"a\n  {{ 'a' + 1 }}", "template line 2 column 10: can only concatenate str (not \"int\") to str"},
      {"{{ x.y }}", "template line 1 column 5: 'x' is undefined"},
      {"{{ d.zz.y }}", "template line 1 column 8: 'dict object' has no attribute 'zz'"},
      {"{{ n + 1 }}", "template line 1 column 6: unsupported operand type(s) for +: 'NoneType' and 'int'"},
      {"{% for i in n %}{% endfor %}", "template line 1 column 4: 'NoneType' object is not iterable"},
      {"{{ 1 // 0 }}", "template line 1 column 6: integer division or modulo by zero"},
      {"{{ [1, 'a']|sort }}", "template line 1 column 13: '<' not supported between instances of 'str' and 'int'"},
      {"{{ x|tojson }}", "template line 1 column 6: Object of type Undefined is not JSON serializable"},
      {"{% set y = 1 %}{% set y.z = 2 %}", "template line 1 column 19: cannot assign attribute on non-namespace object"},
      {"{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "template line 1 column 35: macro 'm' takes not more than 1 argument(s)"},
      {"{{ l.append(4) }}", "template line 1 column 12: access to attribute 'append' of 'list' object is unsafe."},
      {"{{ 9223372036854775807 + 1 }}", "template line 1 column 24: integer result of 9223372036854775807 + 1 does not fit 64 bits"},
      {"{{ l|select|length }}", "template line 1 column 13: object of type 'generator' has no len()"},
  };
  for (const Case& c : cases) {
    auto out = render(c.source, vars);
    ASSERT_FALSE(out) << c.source;
    EXPECT_EQ(out.error().code(), ErrorCode::kInvalidFile) << c.source;
    EXPECT_EQ(out.error().message(), c.message) << c.source;
  }
}

TEST(Jinja, ParseErrorsNameLineAndColumn) {
  struct Case {
    const char* source;
    const char* message;
  } cases[] = {
      {"{% if true %}", "line 1 column 14: unexpected end of template: 'if' opened at line 1 column 4 needs 'elif', "
                        "'else' or 'endif'"},
      {"{% for x in l %}\n{% endif %}", "line 2 column 4: unexpected 'endif': the innermost open block is 'for' (line 1 "
                                        "column 4), which needs 'endfor' or 'else'"},
      {"{% endfor %}", "line 1 column 4: unexpected 'endfor': no block is open"},
      {"{{ }}", "line 1 column 4: expected an expression, got '}}'"},
      {"text\n{{ x +* 2 }}", "line 2 column 7: unexpected '*'"},
      {"{{ (1 }}", "line 1 column 7: unexpected '}', expected ')'"},
      {"{{ 'abc }}", "line 1 column 4: unexpected character ''' (string never closed)"},
      {"{{ x|nosuch }}", "line 1 column 6: no filter named 'nosuch'"},
      {"{% if x is nosuch %}{% endif %}", "line 1 column 12: no test named 'nosuch'"},
      {"{% foo %}", "line 1 column 4: unknown tag 'foo'"},
      {"{% break %}", "line 1 column 4: 'break' outside a for loop"},
      {"{# unclosed", "line 1 column 1: missing end of comment tag ('#}')"},
      {"{{ x", "line 1 column 1: tag opened here is never closed ('}}' expected)"},
      {"{% include 'x.j2' %}", "line 1 column 4: 'include' is not supported: a chat template renders on its own, "
                               "without a loader"},
      {"{{ 99999999999999999999 }}", "line 1 column 4: integer literal 99999999999999999999 does not fit 64 bits"},
      {"{{ '\\xZZ' }}", "line 1 column 5: truncated \\x escape in a string"},
      {"{% macro m(a=1, b) %}{% endmacro %}", "line 1 column 18: non-default argument 'b' follows default argument"},
  };
  for (const Case& c : cases) {
    auto t = parse(c.source);
    ASSERT_FALSE(t) << c.source;
    EXPECT_EQ(t.error().code(), ErrorCode::kParse) << c.source;
    EXPECT_EQ(t.error().message(), c.message) << c.source;
  }
}

// ---- hostile templates: each ends quickly in an error naming the budget ----

// Runs `source`, expects an error containing `what`, and that it came back fast.
void expect_budget_error(const std::string& source, const char* what, RenderOptions options = {}) {
  const auto t0 = std::chrono::steady_clock::now();
  auto out = render(source, Value(), options);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(out) << source.substr(0, 80);
  EXPECT_NE(out.error().message().find(what), std::string::npos) << out.error().message();
  EXPECT_LT(s, 20.0) << source.substr(0, 80) << " took " << s << " s";  // a hang would be minutes
}

TEST(JinjaHostile, DeepNestingIsAParseError) {
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if 1 %}";
  auto t = parse(ifs);
  ASSERT_FALSE(t);
  EXPECT_NE(t.error().message().find("ParseOptions::max_nesting"), std::string::npos) << t.error().message();

  auto parens = parse("{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}");
  ASSERT_FALSE(parens);
  EXPECT_NE(parens.error().message().find("nested deeper"), std::string::npos) << parens.error().message();

  std::string chain = "{{ 1";
  for (int i = 0; i < 100000; ++i) chain += "+1";
  auto sum = parse(chain + " }}");
  ASSERT_FALSE(sum);
  EXPECT_NE(sum.error().message().find("ParseOptions::max_nesting"), std::string::npos) << sum.error().message();

  auto nots = parse("{{ " + [] {
    std::string s;
    for (int i = 0; i < 100000; ++i) s += "not ";
    return s;
  }() + "1 }}");
  ASSERT_FALSE(nots);
}

TEST(JinjaHostile, HugeRangesAndLoopsRunOutOfSteps) {
  expect_budget_error("{{ range(1000000000)|length }}", "Range too big");
  RenderOptions small;
  small.max_steps = 200'000;
  expect_budget_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                      "RenderOptions::max_steps", small);
  expect_budget_error("{% for i in range(100000) %}{% for j in range(100000) %}{{ j|string|length }}{% endfor %}"
                      "{% endfor %}",
                      "RenderOptions::max_steps", small);
  // Work that hides inside one operation (comparing, searching, filtering a long string)
  // is charged too.
  expect_budget_error("{% set s = 'ab' * 1000000 %}{% for i in range(100000) %}{{ s|trim|length }}{% endfor %}",
                      "RenderOptions::max_steps", small);
  expect_budget_error("{% set hay = 'a' * 4000000 %}{{ ('a' * 2000000 + 'b') in hay }}", "RenderOptions::max_steps",
                      small);
  expect_budget_error("{% set big = range(100000)|list %}{% for i in range(100000) %}{% if big == big %}{% endif %}"
                      "{% endfor %}",
                      "RenderOptions::max_steps", small);
}

TEST(JinjaHostile, HugeOutputsStopAtTheSizeBudget) {
  RenderOptions small;
  small.max_output_bytes = 1 << 20;
  expect_budget_error("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "RenderOptions::max_output_bytes",
                      small);
  expect_budget_error("{{ 'x' * 1000000000 }}", "RenderOptions::max_output_bytes", small);
  expect_budget_error("{% set ns = namespace(s='xy') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
                      "{% endfor %}",
                      "RenderOptions::max_output_bytes", small);
  expect_budget_error("{{ ('x' * 100000)|replace('', 'yyyyyyyyyyyyyyy') }}", "RenderOptions::max_output_bytes", small);
  expect_budget_error("{% set l = [1] * 100000 %}{{ l * 100000 }}", "RenderOptions::max_output_bytes", small);
  expect_budget_error("{{ 'x'|indent(1000) * 100 }}{{ ('a\n' * 300000)|indent(1000) }}",
                      "RenderOptions::max_output_bytes", small);
}

TEST(JinjaHostile, RunawayRecursionStopsAtTheDepthBudget) {
  expect_budget_error("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "RenderOptions::max_depth");
  expect_budget_error("{% macro f(n) %}{{ g(n) }}{% endmacro %}{% macro g(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
                      "RenderOptions::max_depth");
  expect_budget_error("{% macro f() %}{% call f() %}{% endcall %}{% endmacro %}{{ f() }}", "RenderOptions::max_depth");
  // Exponential but shallow: the step budget ends it.
  RenderOptions small;
  small.max_steps = 200'000;
  expect_budget_error("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(40) }}",
                      "RenderOptions::max_steps", small);
}

TEST(JinjaHostile, ValuesHoldingThemselvesAreErrorsNotCrashes) {
  expect_budget_error("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", "holding itself");
  expect_budget_error("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns == ns.me.me }}{{ [ns]|tojson }}",
                      "JSON serializable");
  expect_budget_error("{% set ns = namespace(x=1) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}",
                      "nested deeper than 512");
  expect_budget_error("{% set ns = namespace(x=1) %}{% for i in range(100000) %}{% set ns.x = {'k': ns.x} %}"
                      "{% endfor %}",
                      "nested deeper than 512");
}

TEST(JinjaHostile, DefaultBudgetsAreSet) {
  const RenderOptions o;
  EXPECT_EQ(o.max_output_bytes, size_t{16} << 20);
  EXPECT_EQ(o.max_depth, 256);
  EXPECT_EQ(o.max_steps, 20'000'000);
  const ParseOptions p;
  EXPECT_EQ(p.max_nesting, 200);
}

// ---- the API ----

TEST(JinjaValue, FromJsonKeepsDocumentOrderAndRefusesDeepValues) {
  auto v = Value::from_json(nlohmann::ordered_json::parse(R"({"b": 1, "a": [true, null, 2.5, "x"]})"));
  ASSERT_TRUE(v);
  EXPECT_EQ(*render("{{ v }}|{{ v|tojson }}", *Value::dict({{"v", *v}})),
            "{'b': 1, 'a': [True, None, 2.5, 'x']}|{\"b\": 1, \"a\": [true, null, 2.5, \"x\"]}");
  std::string deep(600, '[');
  deep += std::string(600, ']');
  auto d = Value::from_json(nlohmann::json::parse(deep));
  ASSERT_FALSE(d);
  EXPECT_NE(d.error().message().find("nested deeper than 512"), std::string::npos) << d.error().message();
  auto bad = render("x", Value(int64_t{3}));
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message(), "template variables must be a dict, got int");
}

TEST(JinjaValue, ChatInputsAreTransformersVariables) {
  auto t = parse("{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
                 "{% if add_generation_prompt %}<assistant>{% endif %}{{ tools is none }}{{ eos_token }}");
  ASSERT_TRUE(t);
  ChatInputs in;
  in.messages = *Value::from_json(nlohmann::json::parse(R"([{"role": "user", "content": "hi"}])"));
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  EXPECT_EQ(*render_chat(*t, in), "<s><user>hi<assistant>True</s>");
  in.add_generation_prompt = false;
  in.tools = *Value::from_json(nlohmann::json::parse("[]"));
  EXPECT_EQ(*render_chat(*t, in), "<s><user>hiFalse</s>");
}

TEST(JinjaValue, OneTemplateRendersInSeveralThreads) {
  auto t = parse("{% set ns = namespace(n=0) %}{% for i in range(1000) %}{% set ns.n = ns.n + i %}{% endfor %}"
                 "{{ ns.n }}{{ strftime_now('%Y') }}");
  ASSERT_TRUE(t);
  RenderOptions o;
  o.clock = fixed_clock;
  std::vector<std::string> outs(4);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < outs.size(); ++i)
    threads.emplace_back([&, i] {
      for (int k = 0; k < 20; ++k) outs[i] = t->render(Value(), o).value_or("error");
    });
  for (auto& th : threads) th.join();
  for (const std::string& s : outs) EXPECT_EQ(s, "4995002026");
}

}  // namespace
}  // namespace rlx::jinja
