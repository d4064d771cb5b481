*** Settings ***
Documentation     Robot's own Remote library through the gateway's classic front, to libraries served
...               by the reference server and by a native worker: values of each XML-RPC type, binary,
...               dicts, logs and failures, as the README's tables promise.
Library           Remote    ${CLASSIC}/Values    AS    Values
Library           Remote    ${CLASSIC}/Native    AS    Native
Library           Remote    ${CLASSIC}/Fragile    AS    Fragile
Library           Collections
Library           libraries/LogRecorder.py
Resource          classic_parity.resource

*** Test Cases ***
Scalars Cross
    [Template]    Crosses Both Ways
    héllo wörld    str:'héllo wörld'
    ${42}          int:42
    ${-3.25}       float:-3.25
    ${True}        bool:True
    ${EMPTY}       str:''

Bytes Cross
    [Template]    Crosses Both Ways
    ${{bytes([0, 1, 254, 255])}}                   bytes:b'\\x00\\x01\\xfe\\xff'
    ${{bytes([0, 255, 128, 92, 34]) + b' x'}}      bytes:b'\\x00\\xff\\x80\\\\" x'

A List Crosses
    [Template]    Crosses Both Ways
    ${{[1, 'two', 3.5, True]}}    list:[1, 'two', 3.5, True]

A Flat Dict Crosses And Comes Back Dot-Accessible
    ${dict} =    Evaluate    {'name': 'value', 'number': 1}
    ${seen} =    Values.Describe    ${dict}
    Should Be Equal    ${seen}    dict:{'name': 'value', 'number': 1}
    ${back} =    Values.Echo    ${dict}
    Should Be Equal    ${back.name}    value
    Should Be Equal    ${back}[number]    ${1}

A Nested Struct Crosses
    ${dict} =    Evaluate    {'items': [1, 'two'], 'inner': {'number': 1}}
    ${seen} =    Values.Describe    ${dict}
    Should Be Equal    ${seen}    dict:{'items': [1, 'two'], 'inner': {'number': 1}}
    ${back} =    Values.Echo    ${dict}
    Should Be Equal    ${back.inner.number}    ${1}

A Datetime Crosses
    [Template]    Crosses Both Ways
    ${{datetime.datetime(2024, 2, 29, 23, 59, 58)}}    datetime:datetime.datetime(2024, 2, 29, 23, 59, 58)

What Only Python Has Comes As XML-RPC Gives It
    [Documentation]    The README's table, read from the worker's values: None as '', a tuple or set
    ...    as an array, an integer beyond 32 bits as i8 and beyond 64 bits as its digits, Decimal
    ...    and timedelta as their str().
    [Template]    Worker Value Arrives As
    None                                        ${EMPTY}
    (1, 'two')                                  ${{[1, 'two']}}
    {3}                                         ${{[3]}}
    2**40                                       ${{2**40}}
    2**100                                      1267650600228229401496703205376
    decimal.Decimal('1.50')                     1.50
    datetime.timedelta(seconds=90)              0:01:30
    float('inf')                                ${{float('inf')}}

Logs Reach Robot's Log With Their Levels
    Start Recording Logs
    Values.Log At Each Level
    ${logged} =    Stop Recording Logs
    Should Contain In Order    ${logged}    INFO: an info message    INFO (html): <b>an html message</b>
    ...    WARN: a warning    ERROR: an error message

A Failure Carries Its Message
    Run Keyword And Expect Error    ValueError: it broke    Values.Fail With    it broke    ValueError
    Run Keyword And Expect Error    it broke    Values.Fail With    it broke

A Native Failure Carries Its Type And Traceback
    Start Recording Logs
    Run Keyword And Expect Error    LookupError: native failure
    ...    Native.Fail    native failure    LookupError    Traceback (most recent call last):\n line 1
    ${logged} =    Stop Recording Logs
    Should Contain    ${logged}    DEBUG: Traceback (most recent call last):\n line 1

A Continuable Failure Lets The Keyword Go On
    Run Keyword And Expect Error    native failure    Native Fail Continuable Then Go On
    Should Be Equal    ${WENT_ON}    yes

A Crashed Worker Is Replaced For The Next Call
    ${calls} =    Fragile.Count Calls
    Should Be Equal    ${calls}    ${1}
    Run Keyword And Expect Error    *Fragile*died with signal 9*    Fragile.Crash
    ${calls} =    Fragile.Count Calls
    Should Be Equal    ${calls}    ${1}

*** Keywords ***
Crosses Both Ways
    [Arguments]    ${value}    ${description}
    ${seen} =    Values.Describe    ${value}
    Should Be Equal    ${seen}    ${description}    the worker received another value
    ${back} =    Values.Echo    ${value}
    Should Be Equal    ${back}    ${value}    the client received another value

Worker Value Arrives As
    [Arguments]    ${expression}    ${expected}
    ${value} =    Values.Make    ${expression}
    Should Be Equal    ${value}    ${expected}

Native Fail Continuable Then Go On
    Set Test Variable    ${WENT_ON}    no
    Native.Fail    native failure    AssertionError    ${EMPTY}    CONTINUABLE
    Set Test Variable    ${WENT_ON}    yes
