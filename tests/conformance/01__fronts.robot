*** Settings ***
Documentation     Each way the README says a suite reaches a library, through the stock client.
Library           JsonRpcRemote    ${GATEWAY}#fronts    Values    AS    Tcp
Library           JsonRpcRemote    ${GATEWAY_STDIO}    Values    AS    Stdio
Library           JsonRpcRemote    ${GATEWAY}#fronts    LabPower    AS    Power
Library           JsonRpcRemote    ${GATEWAY}#fronts    LabScope    AS    Scope
Library           JsonRpcRemote    ${GATEWAY}#fronts    Upstream    AS    Upstream
Library           JsonRpcRemote    ${GATEWAY}#fronts    Native    AS    Native

*** Test Cases ***
TCP Front
    ${value} =    Tcp.Echo    over TCP
    Should Be Equal    ${value}    over TCP
    ${name} =    Tcp.Library Name
    Should Be Equal    ${name}    ConformanceLibrary

Stdio Front Started By The Client
    ${value} =    Stdio.Echo    over stdio
    Should Be Equal    ${value}    over stdio
    ${list} =    Stdio.Echo    ${{[1, 'two']}}
    Should Be Equal    ${list}    ${{[1, 'two']}}

Glob Route Serves Each Name It Matches
    ${name} =    Power.Library Name
    Should Be Equal    ${name}    LabPower
    ${name} =    Scope.Library Name
    Should Be Equal    ${name}    LabScope

Glob Route Refuses A Denied Name
    Run Keyword And Expect Error    *LabInternal*
    ...    Import Library    JsonRpcRemote    ${GATEWAY}#fronts    LabInternal    AS    Internal

Glob Route Refuses A Dotted Name
    Run Keyword And Expect Error    *LabPower.os*
    ...    Import Library    JsonRpcRemote    ${GATEWAY}#fronts    LabPower.os    AS    PowerOs

Upstream Reference Server
    ${value} =    Upstream.Echo    through an upstream
    Should Be Equal    ${value}    through an upstream
    ${set} =    Upstream.Echo    ${{{1, 2, 3}}}
    Should Be Equal    ${set}    ${{{1, 2, 3}}}

Native Worker
    ${value} =    Native.Echo    to a native worker
    Should Be Equal    ${value}    to a native worker

A Native Worker's Nested Result Reaches The Stock Client
    [Documentation]    The SDK sends a nested value in Python's dialect (pickled), which the client unpickles.
    ${value} =    Native.Return Json In Dialect    {"rows": [[1, 2], [3]], "name": "t"}
    Should Be Equal    ${value}[rows][0][1]    ${2}
    Should Be Equal    ${value}[name]    t
    ${flat} =    Native.Return Json In Dialect    [1, "two"]
    Should Be Equal    ${flat}    ${{[1, 'two']}}

Unknown Library Is Named In The Error
    Run Keyword And Expect Error    *Nope*not served*
    ...    Import Library    JsonRpcRemote    ${GATEWAY}#fronts    Nope    AS    Nope
