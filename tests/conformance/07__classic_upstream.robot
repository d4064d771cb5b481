*** Settings ***
Documentation     JsonRpcRemote through the gateway's classic upstream route (robot-classic-bridge) to
...               the classic server: what Robot's Remote gives directly (classic_parity.resource), but
...               for what only Remote can show (a continuable failure).
Resource          classic_parity.resource
Library           JsonRpcRemote    ${GATEWAY}#upstream    ClassicUpstream    AS    Classic
Library           JsonRpcRemote    ${GATEWAY}#upstream-date    ClassicUpstream    AS    Date
Library           JsonRpcRemote    ${GATEWAY}#upstream-dict    ClassicUpstream    AS    Dict
Library           JsonRpcRemote    ${GATEWAY}#upstream-nested    ClassicUpstream    AS    Nested
Library           JsonRpcRemote    ${GATEWAY}#upstream-named-only    ClassicUpstream    AS    NamedOnly
Library           JsonRpcRemote    ${GATEWAY}#upstream-invalid    ClassicUpstream    AS    Invalid
Library           JsonRpcRemote    ${GATEWAY}#upstream-broken    ClassicUpstream    AS    Broken
Test Setup        Set Library Search Order    Classic
Library           JsonRpcRemote    ${GATEWAY}#upstream-old    ClassicOld    AS    Old

*** Test Cases ***
Text Crosses
    Text Crosses
Numbers And Booleans Cross
    Numbers And Booleans Cross
Bytes Cross
    Bytes Cross
A List Crosses
    A List Crosses
A Dict With Non-String Keys Arrives With String Keys
    A Dict With Non-String Keys Arrives With String Keys
None Arrives As An Empty String
    None Arrives As An Empty String
A Date Arrives As A Datetime And A Timedelta As Seconds
    [Setup]    Set Library Search Order    Date
    A Date Arrives As A Datetime And A Timedelta As Seconds
A Dict Result Is Dot-Accessible
    [Setup]    Set Library Search Order    Dict
    A Dict Result Is Dot-Accessible
A Nested Dict Result Is Dot-Accessible
    [Setup]    Set Library Search Order    Nested
    A Nested Dict Result Is Dot-Accessible
No Return Value Is An Empty String
    No Return Value Is An Empty String
A Binary Result Is Bytes
    A Binary Result Is Bytes
Text With Control Characters Comes As Bytes
    Text With Control Characters Comes As Bytes
A Datetime Result
    A Datetime Result
A Tuple Result Is A List
    A Tuple Result Is A List
Positional, Default, Varargs And Kwargs
    Positional, Default, Varargs And Kwargs
Keyword-Only Arguments
    [Setup]    Set Library Search Order    NamedOnly
    Keyword-Only Arguments
Text With Control Characters Goes As Bytes
    Text With Control Characters Goes As Bytes
An Integer Beyond XML-RPC's Range Is Refused
    An Integer Beyond XML-RPC's Range Is Refused
A Binary Dict Key Is Refused
    A Binary Dict Key Is Refused
Values Inside Containers Are Coerced Too
    Values Inside Containers Are Coerced Too
A Binary Failure Message Comes As Text
    A Binary Failure Message Comes As Text
An Older Server Is Asked Keyword By Keyword
    An Older Server Is Asked Keyword By Keyword
Logs Reach Robot's Log With Their Levels
    Logs Reach Robot's Log With Their Levels
A Failure Carries Its Message
    A Failure Carries Its Message
A Generic Failure Carries Its Message Alone
    A Generic Failure Carries Its Message Alone
The Keyword After A Failure Runs
    The Keyword After A Failure Runs
An Invalid Result Names What Is Wrong
    [Setup]    Set Library Search Order    Invalid
    An Invalid Result Names What Is Wrong
A Broken Connection Names What Is Wrong
    [Setup]    Set Library Search Order    Broken
    A Broken Connection Names What Is Wrong

A Failure Carries The Server's Traceback
    Run Keyword And Expect Error
    ...    *message='ValueError: it broke', type=*, traceback='Traceback (most recent call last):*
    ...    Fail With    it broke

Continuable And Fatal Failures Carry Their Mode
    [Documentation]    Remote makes a continuable or fatal failure of them (06 and 08 show the first;
    ...    a fatal one would end their run); JsonRpcRemote shows the error's mode.
    Run Keyword And Expect Error    *mode=<RunKeywordErrorMode.CONTINUABLE: 'CONTINUABLE'>*
    ...    Fail Continuable    it broke
    Run Keyword And Expect Error    *mode=<RunKeywordErrorMode.FATAL: 'FATAL'>*    Fail Fatal    it broke

A Value Only Python Can Render Is Refused
    [Documentation]    Remote sends str() of an object it has no XML-RPC type for, computed in Robot's
    ...    own process. Through the gateway that would mean running the object's class: the pickle is
    ...    refused, and nothing reaches the server.
    ${calls} =    Count Calls
    Run Keyword And Expect Error    *fractions*Fraction*    Describe    ${{fractions.Fraction(1, 3)}}
    ${after} =    Count Calls
    Should Be Equal    ${after}    ${{$calls + 1}}
