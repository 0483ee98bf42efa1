"""Stack-trace parsing, frame -> repository file mapping, trace symbols and fingerprints (triage)."""

import time

import pytest

from funnel.apps.triage.frames import FrameMatch, fingerprint, mask_variables, match_frames, trace_symbols
from funnel.apps.triage.stacktrace import (
    MAX_TRACE_CHARS,
    UNKNOWN_FORMAT,
    Frame,
    ParsedError,
    owner_names,
    parse_trace,
)


def what(parsed: ParsedError) -> tuple:
    """(language, exception type, message)."""
    return parsed.language, parsed.exception_type, parsed.message


def where(parsed: ParsedError) -> list[tuple]:
    """(file, line, function, owner, library) of each frame, innermost first."""
    return [(f.file, f.line, f.function, f.owner, f.library) for f in parsed.frames]


# --- Python ------------------------------------------------------------------------------------------

PY_FLASK = """\
[2024-05-01 12:00:00,123] ERROR in app: Exception on /users/7 [GET]
Traceback (most recent call last):
  File "/usr/local/lib/python3.11/site-packages/flask/app.py", line 1455, in wsgi_app
    response = self.full_dispatch_request()
  File "/app/svc/api.py", line 18, in show_user
    return jsonify(get_user(request.args))
  File "/app/svc/user.py", line 42, in get_user
    return USERS[args["id"]]
KeyError: 'id'
"""

PY_DURING_HANDLING = """\
Traceback (most recent call last):
  File "/app/svc/cache.py", line 12, in lookup
    return self._data[key]
KeyError: 'user:7'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/app/svc/user.py", line 30, in load
    value = cache.lookup(key)
  File "/app/svc/cache.py", line 14, in lookup
    raise LookupError(f"missing {key}")
LookupError: missing user:7
"""

PY_DIRECT_CAUSE = """\
Traceback (most recent call last):
  File "/app/db.py", line 8, in connect
    sock.connect(addr)
ConnectionRefusedError: [Errno 111] Connection refused

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/app/repo.py", line 20, in fetch
    conn = connect()
  File "/app/db.py", line 10, in connect
    raise DatabaseUnavailable("db down") from e
app.errors.DatabaseUnavailable: db down

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/app/main.py", line 5, in <module>
    main()
  File "/app/service.py", line 33, in run
    raise ServiceError("cannot serve") from e
app.errors.ServiceError: cannot serve
"""

PY_311_QUALNAMES = """\
Traceback (most recent call last):
  File "/srv/app/main.py", line 9, in <module>
    UserService().get_user({})
  File "/srv/app/svc/user.py", line 42, in UserService.get_user
    return self.users[data["id"]] + helper()
           ~~~~~~~~~~^^^^^^^^^^^^
  File "/srv/app/svc/user.py", line 50, in outer.<locals>.inner
    return 1 / 0
           ~~^~~
ZeroDivisionError: division by zero
"""

PY_MULTILINE_MESSAGE = """\
Traceback (most recent call last):
  File "/app/validate.py", line 3, in check
    raise ValueError("bad input:\\n  field a\\n  field b")
ValueError: bad input:
  field a
  field b

2024-05-01 12:00:01 INFO next request
"""

PY_FROZEN_IMPORT = """\
Traceback (most recent call last):
  File "/app/main.py", line 1, in <module>
    import plugins.loader
  File "<frozen importlib._bootstrap>", line 1176, in _find_and_load
  File "<frozen importlib._bootstrap>", line 1140, in _find_and_load_unlocked
  File "/usr/lib/python3/dist-packages/yaml/__init__.py", line 8, in <module>
    from .loader import *
  File "/app/plugins/loader.py", line 4, in <module>
    import missing_dep
ModuleNotFoundError: No module named 'missing_dep'
"""

PY_SYNTAX_ERROR = """\
Traceback (most recent call last):
  File "/app/run.py", line 2, in <module>
    import settings
  File "/app/settings.py", line 7
    DEBUG = (
            ^
SyntaxError: '(' was never closed
"""

PY_TWO_UNRELATED = """\
Traceback (most recent call last):
  File "/app/a.py", line 1, in first
AttributeError: 'NoneType' object has no attribute 'x'
... service restarted ...
Traceback (most recent call last):
  File "/app/b.py", line 2, in second
RuntimeError: later failure
"""

PY_EXCEPTION_GROUP = """\
  + Exception Group Traceback (most recent call last):
  |   File "/app/jobs.py", line 20, in run_all
  |     async with asyncio.TaskGroup() as tg:
  |   File "/usr/lib/python3.11/asyncio/taskgroups.py", line 145, in __aexit__
  |     raise me from None
  | ExceptionGroup: unhandled errors in a TaskGroup (2 sub-exceptions)
  +-+---------------- 1 ----------------
    | Traceback (most recent call last):
    |   File "/app/jobs.py", line 11, in fetch
    |     raise ValueError("bad id")
    | ValueError: bad id
    +---------------- 2 ----------------
    | TypeError: not a string
    +------------------------------------
"""


def test_python_frames_are_innermost_first_with_library_flags():
    parsed = parse_trace(PY_FLASK)
    assert (parsed.language, parsed.exception_type, parsed.message) == ("python", "KeyError", "'id'")
    assert where(parsed) == [
        ("/app/svc/user.py", 42, "get_user", None, False),
        ("/app/svc/api.py", 18, "show_user", None, False),
        ("/usr/local/lib/python3.11/site-packages/flask/app.py", 1455, "wsgi_app", None, True),
    ]
    assert parsed.causes == () and parsed.notes == ()


def test_python_during_handling_keeps_the_last_exception_and_its_frames():
    parsed = parse_trace(PY_DURING_HANDLING)
    assert (parsed.exception_type, parsed.message) == ("LookupError", "missing user:7")
    assert [(f.file, f.line) for f in parsed.frames] == [("/app/svc/cache.py", 14), ("/app/svc/user.py", 30)]
    assert parsed.causes == ("KeyError: 'user:7'",)


def test_python_direct_cause_chain_lists_every_earlier_exception_in_printed_order():
    parsed = parse_trace(PY_DIRECT_CAUSE)
    assert (parsed.exception_type, parsed.message) == ("app.errors.ServiceError", "cannot serve")
    assert [f.function for f in parsed.frames] == ["run", "<module>"]
    assert parsed.causes == (
        "ConnectionRefusedError: [Errno 111] Connection refused",
        "app.errors.DatabaseUnavailable: db down",
    )


def test_python_311_qualnames_give_the_owner_and_carets_are_not_frames():
    parsed = parse_trace(PY_311_QUALNAMES)
    assert [(f.function, f.owner) for f in parsed.frames] == [
        ("inner", None),  # "outer.<locals>" is a function, not a class
        ("get_user", "UserService"),
        ("<module>", None),
    ]
    assert parsed.frames[1].symbol == "UserService.get_user"
    assert parsed.frames[2].symbol == "<module>"


def test_python_multiline_message_stops_at_the_blank_line():
    parsed = parse_trace(PY_MULTILINE_MESSAGE)
    assert parsed.message == "bad input:\n  field a\n  field b"


def test_python_frozen_and_dist_packages_frames_are_library():
    parsed = parse_trace(PY_FROZEN_IMPORT)
    assert parsed.exception_type == "ModuleNotFoundError"
    assert [f.library for f in parsed.frames] == [False, True, True, True, False]
    assert parsed.frames[0].file == "/app/plugins/loader.py"


def test_python_syntax_error_frame_without_function():
    parsed = parse_trace(PY_SYNTAX_ERROR)
    assert parsed.exception_type == "SyntaxError"
    assert where(parsed)[0] == ("/app/settings.py", 7, None, None, False)


def test_python_unrelated_earlier_traceback_is_not_a_cause():
    parsed = parse_trace(PY_TWO_UNRELATED)
    assert (parsed.exception_type, parsed.causes) == ("RuntimeError", ())
    assert [f.file for f in parsed.frames] == ["/app/b.py"]


def test_python_trace_quoted_in_an_indented_log():
    text = "job 7 failed:\n" + "".join(f"    {line}\n" for line in PY_MULTILINE_MESSAGE.splitlines())
    parsed = parse_trace(text)
    assert (parsed.exception_type, parsed.message) == ("ValueError", "bad input:\n  field a\n  field b")
    assert [f.file for f in parsed.frames] == ["/app/validate.py"]


def test_python_exception_group_is_read_without_its_prefixes():
    parsed = parse_trace(PY_EXCEPTION_GROUP)
    assert parsed.language == "python"
    assert parsed.exception_type == "ExceptionGroup"
    assert parsed.frames[0].function == "__aexit__" and parsed.frames[0].library
    assert parsed.frames[1] == Frame("/app/jobs.py", 20, "run_all", None, "python")
    assert parsed.causes == ("ValueError: bad id", "TypeError: not a string")


# --- Java / Kotlin -----------------------------------------------------------------------------------

JAVA_SIMPLE = """\
Exception in thread "main" java.lang.IllegalStateException: user 42 has no account
\tat com.x.service.UserService.getUser(UserService.java:42)
\tat com.x.service.UserService$Loader.load(UserService.java:88)
\tat com.x.web.Handler.lambda$handle$0(Handler.java:17)
\tat java.base/java.util.ArrayList.forEach(ArrayList.java:1596)
\tat java.base/jdk.internal.reflect.NativeMethodAccessorImpl.invoke0(Native Method)
\tat com.x.generated.Proxy12.call(Unknown Source)
\tat app//com.x.Main.main(Main.java:10)
"""

JAVA_SPRING_CAUSED_BY = """\
2024-05-01 12:00:00.123 ERROR 1 --- [main] o.s.boot.SpringApplication : Application run failed

org.springframework.beans.factory.BeanCreationException: Error creating bean with name 'userService'
\tat org.springframework.beans.factory.support.AbstractBeanFactory.doGetBean(AbstractBeanFactory.java:332) ~[spring-beans-6.1.jar:6.1]
\tat com.x.App.main(App.java:12) ~[classes/:na]
Caused by: java.lang.IllegalArgumentException: no datasource
for profile 'prod'
\tat com.x.config.DataConfig.dataSource(DataConfig.java:25) ~[classes/:na]
\tat com.x.config.DataConfig$$SpringCGLIB$$0.dataSource(<generated>) ~[classes/:na]
\t... 1 common frames omitted
Caused by: java.sql.SQLException: Access denied for user 'app'
\tat com.mysql.cj.jdbc.ConnectionImpl.connect(ConnectionImpl.java:823)
\tat com.x.config.DataConfig.open(DataConfig.java:40)
\tat com.x.config.DataConfig.dataSource(DataConfig.java:23)
\t... 2 more
2024-05-01 12:00:00.200 INFO 1 --- [main] shutting down
"""

JAVA_ROOT_WITHOUT_FRAMES = """\
java.lang.RuntimeException: wrapper
\tat com.x.Job.run(Job.java:5)
Caused by: com.x.QuietException: no stack
"""

KOTLIN_NO_MESSAGE = """\
Exception in thread "main" kotlin.KotlinNullPointerException
\tat com.x.app.AppKt.main(App.kt:5)
\tat com.x.app.AppKt.main(App.kt)
"""

JAVA_SUPPRESSED = """\
java.io.IOException: write failed
\tat com.x.io.Sink.write(Sink.java:30)
\tat com.x.io.Copier.copy(Copier.java:12)
\tSuppressed: java.io.IOException: close failed
\t\tat com.x.io.Sink.close(Sink.java:50)
\t\t... 1 more
\tCaused by: java.io.EOFException: eof
\t\tat com.x.io.Other.read(Other.java:1)
Caused by: java.net.SocketException: Broken pipe
\tat java.base/sun.nio.ch.NioSocketImpl.implWrite(NioSocketImpl.java:413)
\tat com.x.io.Sink.flush(Sink.java:44)
\t... 2 more
"""


def test_java_frames_owners_and_library_flags():
    parsed = parse_trace(JAVA_SIMPLE)
    assert what(parsed) == ("java", "java.lang.IllegalStateException", "user 42 has no account")
    assert where(parsed) == [
        ("UserService.java", 42, "getUser", "com.x.service.UserService", False),
        ("UserService.java", 88, "load", "com.x.service.UserService$Loader", False),
        ("Handler.java", 17, "lambda$handle$0", "com.x.web.Handler", False),
        ("ArrayList.java", 1596, "forEach", "java.util.ArrayList", True),
        (None, None, "invoke0", "jdk.internal.reflect.NativeMethodAccessorImpl", True),
        (None, None, "call", "com.x.generated.Proxy12", False),
        ("Main.java", 10, "main", "com.x.Main", False),
    ]
    assert parsed.frames[0].symbol == "UserService.getUser"
    assert parsed.frames[1].symbol == "Loader.load"


def test_java_root_cause_is_main_with_its_frames_and_the_omitted_ones():
    parsed = parse_trace(JAVA_SPRING_CAUSED_BY)
    assert (parsed.exception_type, parsed.message) == (
        "java.sql.SQLException",
        "Access denied for user 'app'",
    )
    assert [(f.owner.rsplit(".", 1)[-1], f.function, f.line) for f in parsed.frames] == [
        ("ConnectionImpl", "connect", 823),
        ("DataConfig", "open", 40),
        ("DataConfig", "dataSource", 23),
        ("DataConfig$$SpringCGLIB$$0", "dataSource", None),  # "... 2 more": the enclosing trace's last two
        ("App", "main", 12),
    ]
    assert parsed.causes == (
        "org.springframework.beans.factory.BeanCreationException: Error creating bean with name 'userService'",
        "java.lang.IllegalArgumentException: no datasource\nfor profile 'prod'",
    )


def test_java_root_cause_without_frames_uses_the_nearest_trace():
    parsed = parse_trace(JAVA_ROOT_WITHOUT_FRAMES)
    assert (parsed.exception_type, parsed.message) == ("com.x.QuietException", "no stack")
    assert [f.function for f in parsed.frames] == ["run"]
    assert parsed.causes == ("java.lang.RuntimeException: wrapper",)


def test_kotlin_without_message_uses_the_reported_message():
    parsed = parse_trace(KOTLIN_NO_MESSAGE, message="login failed for user 7")
    assert (parsed.exception_type, parsed.message) == (
        "kotlin.KotlinNullPointerException",
        "login failed for user 7",
    )
    assert where(parsed) == [
        ("App.kt", 5, "main", "com.x.app.AppKt", False),
        ("App.kt", None, "main", "com.x.app.AppKt", False),
    ]


def test_java_suppressed_exceptions_are_ignored_but_the_chain_is_read():
    parsed = parse_trace(JAVA_SUPPRESSED)
    assert (parsed.exception_type, parsed.message) == ("java.net.SocketException", "Broken pipe")
    assert [(f.function, f.library) for f in parsed.frames] == [
        ("implWrite", True),
        ("flush", False),
        ("write", False),
        ("copy", False),
    ]
    assert parsed.causes == ("java.io.IOException: write failed",)


# --- JavaScript / Node -------------------------------------------------------------------------------

JS_NODE = """\
TypeError: Cannot read properties of undefined (reading 'id')
    at UserService.getUser (/app/src/services/userService.js:10:15)
    at async Promise.all (index 0)
    at async Router.handle [as handle_request] (/app/node_modules/express/lib/router/layer.js:95:5)
    at Object.<anonymous> (/app/index.js:3:1)
    at /app/src/util/retry.js:7:12
    at Module._compile (node:internal/modules/cjs/loader:1256:14)
    at new Promise (<anonymous>)
"""

JS_UNCAUGHT_ESM = """\
file:///app/src/index.mjs:5
  throw new RangeError(`limit ${n} out of range`);
        ^

RangeError: limit 500 out of range
    at checkLimit (file:///app/src/limits.mjs:5:9)
    at file:///app/src/index.mjs:5:1
    at ModuleJob.run (node:internal/modules/esm/module_job:195:25)

Node.js v20.11.0
"""

JS_WEBPACK = """\
Uncaught Error [ERR_INVALID_STATE]: Button clicked twice
    at handleClick (webpack-internal:///./src/components/Button.jsx:12:9)
    at HTMLUnknownElement.callCallback (webpack-internal:///./node_modules/react-dom/cjs/react-dom.development.js:4164:14)
"""

JS_CAUSE = """\
Error: failed to load user 7
    at loadUser (/app/src/user.js:5:11)
    at async main (/app/src/index.js:2:1) {
  [cause]: Error: connect ECONNREFUSED 127.0.0.1:5432
      at TCPConnectWrap.afterConnect [as oncomplete] (node:net:1495:16) {
    errno: -111,
    code: 'ECONNREFUSED'
  }
}
"""


def test_node_frames_async_builtin_anonymous_and_library():
    parsed = parse_trace(JS_NODE)
    assert what(parsed) == ("javascript", "TypeError", "Cannot read properties of undefined (reading 'id')")
    assert where(parsed) == [
        ("/app/src/services/userService.js", 10, "getUser", "UserService", False),
        (None, None, "all", "Promise", True),
        ("/app/node_modules/express/lib/router/layer.js", 95, "handle", "Router", True),
        ("/app/index.js", 3, "<anonymous>", "Object", False),
        ("/app/src/util/retry.js", 7, None, None, False),
        ("node:internal/modules/cjs/loader", 1256, "_compile", "Module", True),
        (None, None, "Promise", None, True),
    ]


def test_node_uncaught_esm_with_source_excerpt_and_file_urls():
    parsed = parse_trace(JS_UNCAUGHT_ESM)
    assert (parsed.exception_type, parsed.message) == ("RangeError", "limit 500 out of range")
    assert [(f.file, f.function) for f in parsed.frames] == [
        ("file:///app/src/limits.mjs", "checkLimit"),
        ("file:///app/src/index.mjs", None),
        ("node:internal/modules/esm/module_job", "run"),
    ]


def test_browser_uncaught_with_error_code_and_webpack_paths():
    parsed = parse_trace(JS_WEBPACK)
    assert (parsed.exception_type, parsed.message) == ("Error", "Button clicked twice")
    assert [f.library for f in parsed.frames] == [False, True]
    assert parsed.frames[0].file == "webpack-internal:///./src/components/Button.jsx"


def test_node_error_cause_is_listed():
    parsed = parse_trace(JS_CAUSE)
    assert (parsed.exception_type, parsed.message) == ("Error", "failed to load user 7")
    assert [f.function for f in parsed.frames] == ["loadUser", "main"]
    assert parsed.causes == ("Error: connect ECONNREFUSED 127.0.0.1:5432",)


# --- Go ----------------------------------------------------------------------------------------------

GO_NIL_POINTER = """\
panic: runtime error: invalid memory address or nil pointer dereference
[signal SIGSEGV: segmentation violation code=0x1 addr=0x0 pc=0x47c1dd]

goroutine 1 [running]:
main.(*UserService).Get(0x0, 0x2a)
\t/app/service/user.go:42 +0x1d
main.main()
\t/app/main.go:10 +0x25
exit status 2
"""

GO_EXPLICIT_PANIC = """\
panic: user 42 not found

goroutine 18 [running]:
panic({0x6c8f20?, 0xc000012345?})
\t/usr/local/go/src/runtime/panic.go:914 +0x21f
github.com/acme/shop/internal/service.(*UserService).Get.func1()
\t/build/internal/service/user.go:61 +0x45
github.com/acme/shop/internal/service.(*UserService).Get(0xc0001a2000, {0x7ffd, 0x2})
\t/build/internal/service/user.go:64 +0x8d
net/http.HandlerFunc.ServeHTTP(0xc000014120?, {0x7a1b40?, 0xc0001c0000?}, 0x0?)
\t/usr/local/go/src/net/http/server.go:2136 +0x29
github.com/gorilla/mux.(*Router).ServeHTTP(0xc000132000, {0x7a1b40, 0xc0001c0000}, 0xc0001b2000)
\t/go/pkg/mod/github.com/gorilla/mux@v1.8.1/mux.go:212 +0x1c5
created by net/http.(*Server).Serve in goroutine 1
\t/usr/local/go/src/net/http/server.go:3086 +0x5cb

goroutine 1 [IO wait]:
internal/poll.runtime_pollWait(0x7f2c, 0x72)
\t/usr/local/go/src/runtime/netpoll.go:343 +0x85
"""

GO_PKG_ERRORS = """\
level=error msg="request failed"
user 42: sql: no rows in result set
github.com/acme/shop/store.(*Users).Find
\t/src/store/users.go:31
github.com/acme/shop/store.Lookup[...]
\t/src/store/generic.go:12
main.main
\t/src/cmd/shop/main.go:20
runtime.main
\t/usr/local/go/src/runtime/proc.go:267
runtime.goexit
\t/usr/local/go/src/runtime/asm_amd64.s:1650
"""

GO_RECOVERED = """\
panic: first failure [recovered]
\tpanic: second failure

goroutine 1 [running]:
main.handle()
\t/app/main.go:7 +0x40
"""

GO_DEADLOCK = """\
fatal error: all goroutines are asleep - deadlock!

goroutine 1 [chan receive]:
main.main()
\t/app/main.go:8 +0x2d
exit status 2
"""


def test_go_nil_pointer_panic():
    parsed = parse_trace(GO_NIL_POINTER)
    assert what(parsed) == ("go", "panic", "runtime error: invalid memory address or nil pointer dereference")
    assert where(parsed) == [
        ("/app/service/user.go", 42, "Get", "UserService", False),
        ("/app/main.go", 10, "main", None, False),
    ]


def test_go_explicit_panic_first_goroutine_only_with_runtime_stdlib_and_module_cache_as_library():
    parsed = parse_trace(GO_EXPLICIT_PANIC)
    assert (parsed.exception_type, parsed.message) == ("panic", "user 42 not found")
    assert [(f.function, f.owner, f.library) for f in parsed.frames] == [
        ("panic", None, True),
        ("Get", "UserService", False),  # the closure Get.func1
        ("Get", "UserService", False),
        ("ServeHTTP", "HandlerFunc", True),
        ("ServeHTTP", "Router", True),
        ("Serve", "Server", True),  # "created by"
    ]


def test_go_pkg_errors_stack():
    parsed = parse_trace(GO_PKG_ERRORS)
    assert what(parsed) == ("go", None, "user 42: sql: no rows in result set")
    assert [(f.file, f.function, f.owner, f.library) for f in parsed.frames] == [
        ("/src/store/users.go", "Find", "Users", False),
        ("/src/store/generic.go", "Lookup", None, False),
        ("/src/cmd/shop/main.go", "main", None, False),
        ("/usr/local/go/src/runtime/proc.go", "main", None, True),
        ("/usr/local/go/src/runtime/asm_amd64.s", "goexit", None, True),
    ]


def test_go_recovered_panic_keeps_the_last_panic():
    parsed = parse_trace(GO_RECOVERED)
    assert (parsed.message, parsed.causes) == ("second failure", ("panic: first failure",))


def test_go_fatal_error():
    parsed = parse_trace(GO_DEADLOCK)
    assert (parsed.exception_type, parsed.message) == ("fatal error", "all goroutines are asleep - deadlock!")
    assert where(parsed) == [("/app/main.go", 8, "main", None, False)]


# --- .NET --------------------------------------------------------------------------------------------

DOTNET_SIMPLE = """\
System.NullReferenceException: Object reference not set to an instance of an object.
   at MyApp.Services.UserService.GetUser(Int32 id) in C:\\src\\MyApp\\Services\\UserService.cs:line 42
   at MyApp.Services.UserService..ctor(IRepo repo)
   at System.Linq.Enumerable.SelectListIterator`2.MoveNext()
   at MyApp.Program.Main(String[] args) in /src/Program.cs:line 10
"""

DOTNET_INNER_ASYNC = """\
Unhandled exception. System.InvalidOperationException: Could not load user 42
 ---> System.ArgumentException: Value cannot be null. (Parameter 'id')
   at MyApp.Data.UserRepo.FindAsync(String id) in /src/MyApp/Data/UserRepo.cs:line 18
--- End of stack trace from previous location ---
   at MyApp.Services.UserService.GetUserAsync(String id) in /src/MyApp/Services/UserService.cs:line 30
   --- End of inner exception stack trace ---
   at MyApp.Services.UserService.GetUserAsync(String id) in /src/MyApp/Services/UserService.cs:line 34
   at MyApp.Program.<Main>$(String[] args) in /src/MyApp/Program.cs:line 5
   at MyApp.Program.<Main>(String[] args)
"""

DOTNET_FRAMEWORK = """\
System.ApplicationException: Save failed ---> System.IO.IOException: Disk full
   at MyApp.Storage.FileStore.<WriteAsync>d__5.MoveNext()
   at MyApp.Storage.FileStore+Writer.Flush()
   --- End of inner exception stack trace ---
   at MyApp.Storage.FileStore.Save(Document doc)
"""

DOTNET_ASPNET_LOG = """\
fail: Microsoft.AspNetCore.Diagnostics.ExceptionHandlerMiddleware[1]
      An unhandled exception has occurred while executing the request.
      System.Collections.Generic.KeyNotFoundException: The given key 'tenant' was not present in the dictionary.
         at System.Collections.Generic.Dictionary`2.get_Item(TKey key)
         at MyApp.Web.TenantMiddleware.InvokeAsync(HttpContext context) in /src/MyApp.Web/TenantMiddleware.cs:line 21
         at Microsoft.AspNetCore.Diagnostics.ExceptionHandlerMiddleware.<Invoke>g__Awaited|6_0(ExceptionHandlerMiddleware middleware, HttpContext context, Task task)
"""


def test_dotnet_frames_with_and_without_files():
    parsed = parse_trace(DOTNET_SIMPLE)
    assert what(parsed) == (
        "dotnet", "System.NullReferenceException", "Object reference not set to an instance of an object."
    )
    assert where(parsed) == [
        ("C:\\src\\MyApp\\Services\\UserService.cs", 42, "GetUser", "MyApp.Services.UserService", False),
        (None, None, ".ctor", "MyApp.Services.UserService", False),
        (None, None, "MoveNext", "System.Linq.Enumerable.SelectListIterator`2", True),
        ("/src/Program.cs", 10, "Main", "MyApp.Program", False),
    ]


def test_dotnet_inner_exception_is_main_and_outer_frames_follow():
    parsed = parse_trace(DOTNET_INNER_ASYNC)
    assert (parsed.exception_type, parsed.message) == (
        "System.ArgumentException",
        "Value cannot be null. (Parameter 'id')",
    )
    assert [(f.function, f.line) for f in parsed.frames] == [
        ("FindAsync", 18),
        ("GetUserAsync", 30),
        ("GetUserAsync", 34),
        ("<Main>$", 5),
        ("<Main>", None),
    ]
    assert parsed.causes == ("System.InvalidOperationException: Could not load user 42",)


def test_dotnet_framework_inner_on_one_line_and_async_state_machines():
    parsed = parse_trace(DOTNET_FRAMEWORK)
    assert (parsed.exception_type, parsed.message) == ("System.IO.IOException", "Disk full")
    assert parsed.causes == ("System.ApplicationException: Save failed",)
    assert [(f.function, f.owner) for f in parsed.frames] == [
        ("WriteAsync", "MyApp.Storage.FileStore"),
        ("Flush", "MyApp.Storage.FileStore+Writer"),
        ("Save", "MyApp.Storage.FileStore"),
    ]
    assert parsed.frames[1].symbol == "Writer.Flush"


def test_dotnet_indented_log():
    parsed = parse_trace(DOTNET_ASPNET_LOG)
    assert parsed.exception_type == "System.Collections.Generic.KeyNotFoundException"
    assert [(f.function, f.library) for f in parsed.frames] == [
        ("get_Item", True),
        ("InvokeAsync", False),
        ("<Invoke>g__Awaited|6_0", True),
    ]


# --- unknown, junk, huge -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, message, expected",
    [
        ("", "", ""),
        ("   \n\t\n", "", ""),
        ("", "payment declined for order 9", "payment declined for order 9"),
        ("\n\nsomething bad happened\nand more", "", "something bad happened"),
        ("\x00\x01\x02\xff\xfe binary\x00 junk\x7f", "", "\xff\xfe binary junk"),
        ("\x1b[31mERROR\x1b[0m disk full", "", "ERROR disk full"),
        ("bad \udcff surrogate", "", "bad  surrogate"),
        ("x" * 2000, "", "x" * 500),
        ("some log line", "y" * 900, "y" * 500),
    ],
)
def test_unknown_input_never_raises_and_keeps_a_printable_message(text, message, expected):
    parsed = parse_trace(text, message)
    assert parsed == ParsedError(None, None, expected, (), notes=(UNKNOWN_FORMAT,))


def test_a_message_line_alone_is_not_a_trace():
    assert parse_trace("KeyError: 'id'").language is None


def test_control_characters_are_stripped_but_lines_and_tabs_kept():
    parsed = parse_trace(GO_NIL_POINTER.replace("\n", "\r\n").replace("panic:", "pa\x00nic:", 1))
    assert parsed.exception_type == "panic" and parsed.frames[0].line == 42


def test_huge_trace_keeps_head_and_tail_and_says_so():
    filler = "".join(f"  log line {i}\n" for i in range(30_000))
    parsed = parse_trace(filler + PY_FLASK.replace("KeyError", "TailError"))
    assert len(filler) > MAX_TRACE_CHARS
    assert parsed.exception_type == "TailError"
    assert any(note.startswith(f"trace cut to {MAX_TRACE_CHARS} characters") for note in parsed.notes)


def _timed(text: str) -> tuple[ParsedError, float]:
    start = time.perf_counter()
    parsed = parse_trace(text)
    return parsed, time.perf_counter() - start


ADVERSARIAL = {  # built when the test runs: ten 10 MB strings would sit in memory for the whole session
    "junk-no-newlines": lambda: "".join(chr(33 + (i * 7919) % 90) for i in range(10_000)) * 1000,
    "junk-lines": lambda: ("ab\x00c" * 25 + "\n") * 100_000,
    "repeated-python": lambda: PY_FLASK * (10_000_000 // len(PY_FLASK)),
    "js-frame-prefix": lambda: "    at " + "a (" * 3_400_000,
    "java-unclosed": lambda: ("\tat a.b(" + "x" * 3990 + "\n") * 2500,
    "dotnet-in": lambda: ("   at A.B(" + " in " * 1000 + ":line \n") * 2500,
    "go-location": lambda: ("\t" + "a" * 3990 + ":\n") * 2500,
    "whitespace": lambda: ("x" + " " * 3998 + "\n") * 2500,
    "java-header": lambda: ("a." * 1990 + "B:\n") * 2500,
    "java-location": lambda: ("\tat a.b(" + "a." * 1995 + "!)\n") * 2500,
    "java-caused-by-chain": lambda: "Caused by: a.B: x\n\tat a.b(A.java:1)\n\t... 99999 more\n" * 250_000,
    "python-file": lambda: ('  File "' + "a" * 3990 + "\n") * 2500,
}


@pytest.mark.parametrize("name", ADVERSARIAL)
def test_large_and_adversarial_inputs_are_fast(name):
    text = ADVERSARIAL[name]()
    assert len(text) > 9_900_000  # about 10 MB
    parsed, seconds = _timed(text)
    # 0.05-0.4 s idle; over 1.5 s was seen on a loaded machine. Backtracking on 10 MB would take hours.
    assert seconds < 20, f"{seconds:.2f}s"
    assert parsed.notes[0].startswith("trace cut")


def test_repeated_python_trace_is_still_parsed():
    parsed, _ = _timed(PY_FLASK * 100_000)
    assert (parsed.exception_type, len(parsed.frames), parsed.causes) == ("KeyError", 3, ())


# --- matching frames to repository files -------------------------------------------------------------

REPO = [
    "service/user.py",
    "src/billing/models.py",
    "src/shop/models.py",
    "web/handlers.py",
    "admin/handlers.py",
    "legacy/api/handlers.py",
    "src/index.mjs",
    "src/components/Button.jsx",
    "MyApp/Services/UserService.cs",
    "MyApp/Data/Repo.cs",
    "src/main/java/com/x/service/UserService.java",
    "src/main/java/com/x/web/Handler.java",
    "src/main/kotlin/com/x/app/App.kt",
    "internal/service/user.go",
    "tools/Thread.java",
    "lib/loader.py",
]


def js_frame(path: str) -> Frame:
    return Frame(path, 1, "f", None, "javascript", "node_modules" in path)


def py_frame(path: str, library: bool = False) -> Frame:
    return Frame(path, 1, "f", None, "python", library)


@pytest.mark.parametrize(
    "frame, expected",
    [
        (py_frame("/app/service/user.py"), ("service/user.py", True)),
        (py_frame("/usr/src/app/service/user.py"), ("service/user.py", True)),
        (py_frame("/home/ci/proj/service/user.py"), ("service/user.py", True)),
        (py_frame("service/user.py"), ("service/user.py", True)),
        (py_frame("/app/./x/../service/user.py"), ("service/user.py", True)),
        (
            py_frame("/app/billing/models.py"),
            ("src/billing/models.py", False),
        ),  # 2 components, prefix differs
        (py_frame("/app/src/billing/models.py"), ("src/billing/models.py", True)),
        (py_frame("/opt/other/loader.py"), ("lib/loader.py", False)),  # unique basename: a guess
        (py_frame("/app/models.py"), None),  # two models.py, neither closer: ambiguous
        (py_frame("/app/handlers.py"), None),
        (py_frame("/srv/web/handlers.py"), ("web/handlers.py", True)),
        (py_frame("/srv/api/handlers.py"), ("legacy/api/handlers.py", False)),
        (py_frame("/app/service/missing.py"), None),
        (py_frame("<stdin>"), None),
        (
            Frame(
                "C:\\src\\MyApp\\Services\\UserService.cs",
                42,
                "GetUser",
                "MyApp.Services.UserService",
                "dotnet",
            ),
            ("MyApp/Services/UserService.cs", True),
        ),
        (Frame("file:///app/src/index.mjs", 5, None, None, "javascript"), ("src/index.mjs", True)),
        (
            Frame("webpack-internal:///./src/components/Button.jsx", 1, "h", None, "javascript"),
            ("src/components/Button.jsx", True),
        ),
        (
            Frame("http://localhost:3000/src/components/Button.jsx?t=17", 1, "h", None, "javascript"),
            ("src/components/Button.jsx", True),
        ),
        (
            Frame("/build/internal/service/user.go", 64, "Get", "UserService", "go"),
            ("internal/service/user.go", True),
        ),
        (
            Frame("github.com/acme/shop/internal/service/user.go", 64, "Get", "UserService", "go"),
            ("internal/service/user.go", True),
        ),
        (Frame("/usr/local/go/src/runtime/panic.go", 914, "panic", None, "go", True), None),
        (Frame(None, None, "all", "Promise", "javascript", True), None),
        (Frame(None, None, "call", None, "python"), None),
    ],
)
def test_match_frames_by_longest_component_suffix(frame, expected):
    assert match_frames([frame], REPO) == ([FrameMatch(frame, *expected)] if expected else [])


@pytest.mark.parametrize(
    "frame, repo, expected",
    [
        # the repository is the installed package itself: src-layout and flat layout
        (
            py_frame("/usr/lib/python3.11/site-packages/requests/models.py", True),
            ["src/requests/models.py", "docs/models.py"],
            "src/requests/models.py",
        ),
        (
            py_frame("/usr/lib/python3/dist-packages/requests/models.py", True),
            ["requests/models.py"],
            "requests/models.py",
        ),
        (py_frame("/usr/lib/python3.11/site-packages/six.py", True), ["six.py", "tests/six.py"], "six.py"),
        (
            js_frame("/app/node_modules/express/lib/router/layer.js"),
            ["lib/router/layer.js", "index.js"],
            "lib/router/layer.js",
        ),
        (js_frame("/app/node_modules/@acme/ui/dist/button.js"), ["dist/button.js"], "dist/button.js"),
        (
            js_frame("/app/node_modules/lodash/lodash.js"),
            ["vendor/lodash/lodash.js"],
            "vendor/lodash/lodash.js",
        ),
        # ... and when it is not: a file with the same basename is not enough
        (py_frame("/usr/lib/python3.11/site-packages/requests/models.py", True), ["app/models.py"], None),
        (
            py_frame("/usr/lib/python3.11/site-packages/requests/models.py", True),
            ["a/requests/models.py", "b/requests/models.py"],
            None,
        ),
        (py_frame("/usr/lib/python3.11/site-packages/six.py", True), ["lib/six.py"], None),
        (js_frame("/app/node_modules/express/index.js"), ["index.js", "src/index.js"], None),
        # library frames without a package marker are never matched
        (py_frame("<frozen importlib._bootstrap>", True), ["<frozen importlib._bootstrap>"], None),
        (py_frame("/usr/lib/python3.11/json/decoder.py", True), ["json/decoder.py"], None),
        (
            Frame("node:internal/modules/cjs/loader", 1, "f", None, "javascript", True),
            ["internal/modules/cjs/loader"],
            None,
        ),
    ],
)
def test_match_frames_installed_packages(frame, repo, expected):
    assert match_frames([frame], repo) == ([FrameMatch(frame, expected, True)] if expected else [])


def java_frame(owner: str, file: str | None, library: bool = False) -> Frame:
    return Frame(file, 1, "m", owner, "java", library)


@pytest.mark.parametrize(
    "frame, expected",
    [
        (
            java_frame("com.x.service.UserService", "UserService.java"),
            ("src/main/java/com/x/service/UserService.java", True),
        ),
        (
            java_frame("com.x.service.UserService$Loader", "UserService.java"),
            ("src/main/java/com/x/service/UserService.java", True),
        ),
        (java_frame("com.x.web.Handler$$Lambda$14", None), ("src/main/java/com/x/web/Handler.java", True)),
        (java_frame("com.x.app.AppKt", "App.kt"), ("src/main/kotlin/com/x/app/App.kt", True)),
        (
            java_frame("org.other.UserService", "UserService.java"),
            ("src/main/java/com/x/service/UserService.java", False),
        ),
        (java_frame("java.lang.Thread", "Thread.java", library=True), None),
        (java_frame("com.x.Missing", "Missing.java"), None),
        (
            Frame(None, None, "GetUser", "MyApp.Services.UserService", "dotnet"),
            ("MyApp/Services/UserService.cs", False),
        ),
        (Frame(None, None, "Find", "MyApp.Data.Repo+Cache", "dotnet"), ("MyApp/Data/Repo.cs", False)),
        (Frame(None, None, "MoveNext", "System.Linq.Enumerable", "dotnet", True), None),
    ],
)
def test_match_frames_by_class(frame, expected):
    assert match_frames([frame], REPO) == ([FrameMatch(frame, *expected)] if expected else [])


def test_match_frames_java_ambiguous_basename_prefers_the_package_or_skips():
    repo = ["a/src/com/a/UserService.java", "b/src/com/b/UserService.java"]
    assert [m.path for m in match_frames([java_frame("com.b.UserService", "UserService.java")], repo)] == [
        "b/src/com/b/UserService.java"
    ]
    assert match_frames([java_frame("com.c.UserService", "UserService.java")], repo) == []


def test_match_frames_keeps_frame_order_and_normalises_repo_paths():
    parsed = parse_trace(PY_FLASK)
    repo = [".\\svc\\user.py", "./svc/api.py", "app.py"]  # "app.py" is not flask's app.py
    assert [(m.frame.function, m.path, m.exact) for m in match_frames(parsed.frames, repo)] == [
        ("get_user", "svc/user.py", True),
        ("show_user", "svc/api.py", True),
    ]


def test_match_frames_of_a_parsed_java_trace():
    matches = match_frames(parse_trace(JAVA_SIMPLE).frames, REPO)
    assert [(m.frame.function, m.path) for m in matches] == [
        ("getUser", "src/main/java/com/x/service/UserService.java"),
        ("load", "src/main/java/com/x/service/UserService.java"),
        ("lambda$handle$0", "src/main/java/com/x/web/Handler.java"),
    ]


# --- symbols and fingerprints ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "trace, expected",
    [
        (
            JAVA_SIMPLE,
            [
                "UserService",
                "UserService.getUser",
                "getUser",
                "Loader",
                "Loader.load",
                "load",
                "Handler",
                "Proxy12",
                "Proxy12.call",
                "call",
                "Main",
            ],
        ),
        (PY_311_QUALNAMES, ["inner", "UserService", "UserService.get_user", "get_user"]),
        (JS_NODE, ["UserService", "UserService.getUser", "getUser"]),
        ("TypeError: x\n    at HTMLButtonElement.<anonymous> (https://example.com/js/main.js:2:12)\n", []),
        (GO_EXPLICIT_PANIC, ["UserService", "UserService.Get", "Get"]),
        (GO_NIL_POINTER, ["UserService", "UserService.Get", "Get"]),
        (
            DOTNET_INNER_ASYNC,
            [
                "UserRepo",
                "UserRepo.FindAsync",
                "FindAsync",
                "UserService",
                "UserService.GetUserAsync",
                "GetUserAsync",
                "Program",
            ],
        ),
    ],
)
def test_trace_symbols(trace, expected):
    assert trace_symbols(parse_trace(trace)) == expected


@pytest.mark.parametrize(
    "owner, expected",
    [
        ("com.x.Outer$Inner", ("Outer", "Inner")),
        ("com.x.Outer$1", ("Outer",)),
        ("com.x.svc.UserRepo$load$2", ("UserRepo",)),  # Kotlin: a lambda inside `load`
        ("com.x.Foo$$Lambda$14", ("Foo",)),
        ("MyApp.Program+<>c", ("Program",)),
        ("MyApp.Program.<>c__DisplayClass0_0", ("Program",)),
        ("System.Collections.Generic.List`1", ("List",)),
        ("UserService", ("UserService",)),
        (None, ()),
    ],
)
def test_owner_names(owner, expected):
    assert owner_names(owner) == expected


PY_SAME_ERROR_ELSEWHERE = (
    PY_FLASK.replace("/app/", "/srv/releases/v2/")
    .replace("line 42", "line 47")
    .replace("line 18", "line 19")
    .replace("KeyError: 'id'", "KeyError: 'user_id_8812'")
)


def test_fingerprint_ignores_prefixes_lines_and_messages():
    assert fingerprint(parse_trace(PY_FLASK)) == fingerprint(parse_trace(PY_SAME_ERROR_ELSEWHERE))
    assert len(fingerprint(parse_trace(PY_FLASK))) == 16


@pytest.mark.parametrize(
    "changed",
    [
        PY_FLASK.replace("in get_user", "in get_account"),  # a different raising function
        PY_FLASK.replace("KeyError", "IndexError"),
        PY_FLASK.replace("/app/svc/user.py", "/app/svc/account.py"),
    ],
)
def test_fingerprint_changes_with_type_or_raising_place(changed):
    assert fingerprint(parse_trace(changed)) != fingerprint(parse_trace(PY_FLASK))


def test_fingerprint_counts_only_the_top_application_frames():
    deeper = PY_FLASK.replace("in show_user", "in list_users")  # the second application frame
    assert fingerprint(parse_trace(deeper), top=1) == fingerprint(parse_trace(PY_FLASK), top=1)
    assert fingerprint(parse_trace(deeper), top=2) != fingerprint(parse_trace(PY_FLASK), top=2)
    library = PY_FLASK.replace("in wsgi_app", "in dispatch")  # library frames never count
    assert fingerprint(parse_trace(library), top=5) == fingerprint(parse_trace(PY_FLASK), top=5)


def test_fingerprint_of_unknown_format_masks_ids():
    a = parse_trace(
        "Timeout after 3000ms calling 10.0.0.7 for 3f2a1c9e-8b7d-4c6e-9f00-1a2b3c4d5e6f at 0x7ffe"
    )
    b = parse_trace("Timeout after 5000ms calling 10.0.0.9 for 00000000-1111-2222-3333-444444444444 at 0x1")
    c = parse_trace("Connection reset calling 10.0.0.7")
    assert fingerprint(a) == fingerprint(b) != fingerprint(c)


def test_mask_variables():
    assert mask_variables("order 42 hash deadbeef12 id 3F2A1C9E-8B7D-4C6E-9F00-1A2B3C4D5E6F ptr 0xc000") == (
        "order <n> hash <hex> id <uuid> ptr <hex>"
    )
