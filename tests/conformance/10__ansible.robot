*** Settings ***
Documentation     Modules of ansible-core on this machine through robot-ansible-worker, as the README's
...               example uses them. Skipped where ansible-playbook is not installed.
Library           OperatingSystem
Library           Collections
Suite Setup       Import Ansible

*** Test Cases ***
A Module Runs And Returns Its Result
    ${result} =    Local.Run Action    ping
    Should Be Equal    ${result}[ping]    pong
    Should Be Equal    ${result}[changed]    ${False}

A Module Of Its Own Keyword
    ${path} =    Join Path    ${LAB_DIR}    touched-by-ansible
    ${result} =    Files.file    path=${path}    state=touch
    Should Be True    ${result}[changed]
    File Should Exist    ${path}

A Failing Module Fails Its Keyword And The Next One Runs
    Run Keyword And Expect Error    *command*    Local.Run Action    command    cmd=false
    ${result} =    Local.Run Action    ping
    Should Be Equal    ${result}[ping]    pong

A Command's Whole Result
    ${result} =    Command.Run Action    command    cmd=echo hello
    Should Be Equal As Integers    ${result}[rc]    0
    Should Be Equal    ${result}[stdout]    hello
    Should Be Equal    ${result}[cmd]    ${{['echo', 'hello']}}

Facts
    ${facts} =    Facts.Gather Facts    subset=min
    Should Not Be Empty    ${facts}[ansible_distribution]
    Dictionary Should Not Contain Key    ${facts}    ansible_env

*** Keywords ***
Import Ansible
    ${found} =    Evaluate    shutil.which('ansible-playbook') is not None    modules=shutil
    Skip If    not $found    ansible-playbook is not installed (apt install ansible-core)
    Import Library    JsonRpcRemote    ${GATEWAY}#ansible    Ansible    AS    Local
    Import Library    JsonRpcRemote    ${GATEWAY}#ansible    Ansible    modules=file    AS    Files
    Import Library    JsonRpcRemote    ${GATEWAY}#ansible-command    Ansible    AS    Command
    Import Library    JsonRpcRemote    ${GATEWAY}#ansible-facts    Ansible    AS    Facts
