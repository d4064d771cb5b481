*** Settings ***
Documentation     Node's MCP reference server through robot-mcp-worker, as the README's example uses
...               it. Skipped where the server is not installed (RJG_MCP_SERVER; deploy/test.sh
...               installs it into BUILD/npm).
Library           Collections
Library           libraries/LogRecorder.py
Suite Setup       Import The MCP Server

*** Test Cases ***
Tools Are Keywords
    ${text} =    Everything.get-sum    1    2.5
    Should Be Equal    ${text}    The sum of 1 and 2.5 is 3.5.
    ${text} =    Everything.echo    héllo
    Should Be Equal    ${text}    Echo: héllo

Structured Content Is The Result
    ${weather} =    Everything.get-structured-content    location=Chicago
    Should Be True    ${weather}[temperature] > -50

Progress Reaches The Log Before The Answer
    Start Recording Logs
    Everything.trigger-long-running-operation    duration=1    steps=2
    ${logged} =    Stop Recording Logs
    Should Contain Match    ${logged}    INFO: progress 1/2*
    Should Contain Match    ${logged}    INFO: progress 2/2*

The Whole Result Of Call Tool
    ${result} =    CallTool.Call Tool    get-sum    a=${1}    b=x
    Should Be True    ${result}[isError]
    ${result} =    CallTool.Call Tool    get-sum    a=${1}    b=${2}
    Should Be Equal    ${result}[content][0][text]    The sum of 1 and 2 is 3.

Resources Are Listed And Read
    ${resources} =    Resources.List Resources
    ${read} =    Resources.Read Resource    ${resources}[0][uri]
    Should Not Be Empty    ${read}[contents]

Tools Are Listed
    ${tools} =    Tools.List Tools
    ${names} =    Evaluate    [tool['name'] for tool in $tools]
    Should Contain    ${names}    get-sum

*** Keywords ***
Import The MCP Server
    Skip If    not $MCP_SERVER
    ...    Node's MCP reference server is not installed: set RJG_MCP_SERVER to its mcp-server-everything (deploy/test.sh installs it)
    Import Library    JsonRpcRemote    ${GATEWAY}#mcp    Everything    AS    Everything
    Import Library    JsonRpcRemote    ${GATEWAY}#mcp-call-tool    Everything    AS    CallTool
    Import Library    JsonRpcRemote    ${GATEWAY}#mcp-resources    Everything    AS    Resources
    Import Library    JsonRpcRemote    ${GATEWAY}#mcp-tools    Everything    AS    Tools
